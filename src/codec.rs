//! Byte codecs shared by every layer: big-endian integers (keys sort numerically), the
//! `‖ 0x00 ‖` join of identifiers, constant-time comparison of secrets and digests, and the
//! bincode encoding of derived values.

/// Big-endian bytes of a u64.
pub fn be(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

/// Reads a big-endian u64 from the first 8 bytes.
pub fn read_be(b: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(..8)?.try_into().ok()?))
}

/// `a ‖ 0x00 ‖ b`: identifiers hold no NUL, so joined keys never collide and a prefix scan of
/// `a ‖ 0x00` finds exactly `a`'s entries.
pub fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(a.len() + 1 + b.len());
    k.extend_from_slice(a);
    k.push(0);
    k.extend_from_slice(b);
    k
}

/// Compares two strings in constant time (for their length): digests and secrets.
pub fn ct_eq(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// A string as messages show it: in double quotes, with `"` and `\\` escaped and every
/// control character (C0, DEL, C1) written as `\\u{XXXX}`, so text from a request or a
/// tampered record can never drive the terminal that shows the message.
pub fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

thread_local! {
    /// [`bincode_exact`]'s buffer.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The most bytes [`bincode_exact`]'s buffer keeps between calls.
const SCRATCH_KEPT: usize = 64 << 10;

/// The bincode encoding (standard configuration) of a derived value, in an allocation of
/// exactly its length. It is encoded into a buffer kept per thread and copied out once:
/// `bincode::serde::encode_to_vec` grows its vector by doubling, and those reallocations were
/// about a quarter of its cost on the per-record path (docs/performance.md). The bytes are
/// the same.
///
/// # Panics
/// When `v` cannot be encoded by bincode: never for the crate's own derived types (plain
/// structs of strings, integers, options and vectors).
pub fn bincode_exact<T: serde::Serialize>(v: &T) -> Vec<u8> {
    SCRATCH.with_borrow_mut(|buf| {
        buf.clear();
        bincode::serde::encode_into_std_write(v, buf, bincode::config::standard())
            .expect("derived values always encode");
        let out = buf.as_slice().to_vec();
        // A value of unusual size leaves no large buffer behind.
        if buf.capacity() > SCRATCH_KEPT {
            *buf = Vec::new();
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_endian_sorts_numerically() {
        let mut v = [3u64, 256, 1, u64::MAX, 0];
        v.sort_by_key(|n| be(*n));
        assert_eq!(v, [0, 1, 3, 256, u64::MAX]);
        assert_eq!(read_be(&be(77)), Some(77));
        assert_eq!(read_be(&[1, 2]), None);
        assert_eq!(join(b"a", b"b"), b"a\0b");
        assert!(ct_eq("abc", "abc") && !ct_eq("abc", "abd") && !ct_eq("ab", "abc"));
    }

    #[test]
    fn bincode_exact_is_bincode_in_an_allocation_of_its_length() {
        let bincode = |v: &(String, Option<u64>, Vec<String>)| {
            bincode::serde::encode_to_vec(v, bincode::config::standard()).unwrap()
        };
        // A small value, one past the kept buffer's bound, then a small one again (the
        // buffer is reset, and nothing of the large value is left in the next one).
        for n in [3usize, 70_000, 0, 300] {
            let v = (
                "é".repeat(n),
                Some(n as u64 * 1_000_003),
                vec!["x".repeat(n); 2],
            );
            let exact = bincode_exact(&v);
            assert_eq!(exact, bincode(&v), "value of {n}");
            assert_eq!(exact.capacity(), exact.len(), "value of {n}");
            let kept = SCRATCH.with_borrow(Vec::capacity);
            assert!(
                kept <= SCRATCH_KEPT,
                "{kept} bytes kept after a value of {n}"
            );
        }
    }

    #[test]
    fn quoted_escapes_what_could_drive_a_terminal() {
        assert_eq!(quoted("req-1"), "\"req-1\"");
        assert_eq!(quoted("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(
            quoted("x\u{1b}[2J\u{9b}\u{7f}é"),
            "\"x\\u{001b}[2J\\u{009b}\\u{007f}é\""
        );
    }
}
