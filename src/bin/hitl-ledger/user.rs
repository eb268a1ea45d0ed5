//! Who runs the command line: the name of the process's real user id in the password database
//! (never `$USER` or `$LOGNAME`, which any caller sets), recorded as `local:<name>` with the
//! `admin` role, or `local:uid:<n>` when the database has no entry for it.

use hitl_ledger::format::record::{Actor, is_valid_id};

/// The process's real user id.
pub fn real_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// The name of user `uid` in the password database, if it has one.
pub fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: a zeroed passwd is a valid out-parameter for getpwuid_r.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call, and `buf`'s length is what we pass; on
    // success `found` points at `pw`, whose strings live in `buf`.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pw.pw_name.is_null() {
        return None;
    }
    // SAFETY: pw_name is a NUL-terminated string inside `buf`, alive here.
    let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
    name.to_str().ok().map(str::to_owned)
}

/// The local command line's principal, `local:<name>`.
fn local_principal() -> String {
    let uid = real_uid();
    let user = user_name(uid)
        .filter(|u| is_valid_id(u) && u.len() < 200)
        .unwrap_or_else(|| format!("uid:{uid}"));
    format!("local:{user}")
}

/// The local command line's actor.
pub fn local_admin() -> Actor {
    Actor::with_role(local_principal(), "admin", None)
}

/// The local command line's actor for `break-glass`: the same principal in the break_glass
/// role (on the command line the file permissions are the access control).
pub fn local_break_glass() -> Actor {
    Actor::with_role(local_principal(), "break_glass", None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_admin_is_the_real_user_not_the_environment() {
        // SAFETY: no other test of this binary reads the environment concurrently.
        unsafe { std::env::set_var("USER", "rita.reviewer") };
        let a = local_admin();
        let expected = user_name(real_uid()).unwrap_or_else(|| format!("uid:{}", real_uid()));
        assert_eq!(a.principal, format!("local:{expected}"));
        assert_ne!(a.principal, "local:rita.reviewer");
        assert_eq!(a.role, "admin");
    }
}
