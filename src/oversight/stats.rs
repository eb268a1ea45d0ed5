//! The numeric functions of the shift tests and the percentile sketch: the regularized upper
//! incomplete gamma function Q(a, x) (series and Lentz's continued fraction, ln Γ by Lanczos),
//! from which the normal survival (`erfc`) and the chi-square survival follow; and a
//! relative-error histogram for percentiles whose memory does not grow with the values added.

use std::collections::BTreeMap;

/// ln Γ(x) for x > 0 (Lanczos, g = 7, n = 9; relative error below 1e-15).
pub fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)Γ(1−x) = π / sin(πx).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The regularized upper incomplete gamma function Q(a, x) = Γ(a, x) / Γ(a), for a > 0 and
/// x ≥ 0.
pub fn gamma_q(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    if x < a + 1.0 {
        1.0 - gamma_p_series(a, x)
    } else {
        gamma_q_fraction(a, x)
    }
}

fn gamma_p_series(a: f64, x: f64) -> f64 {
    let mut sum = 1.0 / a;
    let mut term = sum;
    let mut n = a;
    for _ in 0..10_000 {
        n += 1.0;
        term *= x / n;
        sum += term;
        if term.abs() < sum.abs() * 1e-16 {
            break;
        }
    }
    (sum.ln() - x + a * x.ln() - ln_gamma(a)).exp()
}

fn gamma_q_fraction(a: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let mut b = x + 1.0 - a;
    let mut c = 1.0 / TINY;
    let mut d = 1.0 / b;
    let mut h = d;
    for i in 1..10_000 {
        let an = -(i as f64) * (i as f64 - a);
        b += 2.0;
        d = an * d + b;
        if d.abs() < TINY {
            d = TINY;
        }
        c = b + an / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let delta = d * c;
        h *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    (-x + a * x.ln() - ln_gamma(a)).exp() * h
}

/// The complementary error function for x ≥ 0: erfc(x) = Q(1/2, x²).
pub fn erfc(x: f64) -> f64 {
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    gamma_q(0.5, x * x)
}

/// The two-sided p-value of a standard normal statistic z: P(|Z| ≥ |z|) = erfc(|z| / √2).
pub fn normal_two_sided(z: f64) -> f64 {
    erfc(z.abs() / std::f64::consts::SQRT_2)
}

/// The chi-square survival function: P(X ≥ x) for `df` degrees of freedom = Q(df/2, x/2).
pub fn chi_square_sf(x: f64, df: f64) -> f64 {
    gamma_q(df / 2.0, x / 2.0)
}

/// The relative accuracy of [`Sketch`]'s quantiles: a reported value is within 1% of the
/// value of the rank asked for.
pub const SKETCH_RELATIVE_ERROR: f64 = 0.01;

/// A histogram of non-negative durations (µs) with logarithmic buckets: the value of a
/// bucket is within [`SKETCH_RELATIVE_ERROR`] of every value in it (the DDSketch mapping,
/// γ = (1 + α) / (1 − α)), so a nearest-rank quantile read from it is within that relative
/// error of the exact one. It holds at most one counter per bucket (about 1,700 buckets from
/// 1 µs to 10,000 years), whatever the number of values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sketch {
    zeros: u64,
    buckets: BTreeMap<i32, u64>,
    count: u64,
}

fn gamma() -> f64 {
    (1.0 + SKETCH_RELATIVE_ERROR) / (1.0 - SKETCH_RELATIVE_ERROR)
}

impl Sketch {
    /// Adds one value (µs); a negative value counts as 0.
    pub fn add(&mut self, micros: i64) {
        self.count += 1;
        if micros <= 0 {
            self.zeros += 1;
            return;
        }
        let i = ((micros as f64).ln() / gamma().ln()).ceil() as i32;
        *self.buckets.entry(i).or_default() += 1;
    }

    /// Adds every value of another sketch.
    pub fn merge(&mut self, other: &Sketch) {
        self.count += other.count;
        self.zeros += other.zeros;
        for (i, n) in &other.buckets {
            *self.buckets.entry(*i).or_default() += n;
        }
    }

    /// Number of values.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The nearest-rank quantile `q` (0 < q ≤ 1) in µs: the value of rank ⌈q·n⌉ (at least 1),
    /// within the relative error; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        if rank <= self.zeros {
            return Some(0.0);
        }
        let mut seen = self.zeros;
        let g = gamma();
        for (i, n) in &self.buckets {
            seen += n;
            if seen >= rank {
                return Some(2.0 * g.powi(*i) / (g + 1.0));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(1e-300)
    }

    #[test]
    fn erfc_matches_published_values() {
        // Abramowitz and Stegun, table 7.1; NIST DLMF 7.
        for (x, want) in [
            (0.0, 1.0),
            (0.5, 0.479_500_122_186_953_5),
            (1.0, 0.157_299_207_050_285_13),
            (2.0, 0.004_677_734_981_047_266),
            (3.0, 2.209_049_699_858_544e-5),
            (5.0, 1.537_459_794_428_034_8e-12),
        ] {
            assert!(close(erfc(x), want, 1e-9), "erfc({x}) = {}", erfc(x));
        }
        assert!(close(normal_two_sided(1.959_963_984_540_054), 0.05, 1e-9));
        assert!(close(normal_two_sided(-2.575_829_303_548_901), 0.01, 1e-9));
    }

    #[test]
    fn chi_square_survival_matches_published_critical_values() {
        // Upper critical values of the chi-square distribution (NIST/SEMATECH handbook 1.3.6.7.4).
        for (x, df, p) in [
            (3.841_458_820_694_124, 1.0, 0.05),
            (6.634_896_601_021_213, 1.0, 0.01),
            (9.210_340_371_976_182, 2.0, 0.01),
            (11.070_497_693_516_351, 5.0, 0.05),
            (23.209_251_158_954_356, 10.0, 0.01),
            (124.342_113_404_971_5, 100.0, 0.05),
        ] {
            let got = chi_square_sf(x, df);
            assert!(close(got, p, 1e-8), "sf({x}, {df}) = {got}");
        }
        assert_eq!(chi_square_sf(0.0, 3.0), 1.0);
    }

    #[test]
    fn ln_gamma_matches_factorials() {
        assert!(close(ln_gamma(1.0).exp(), 1.0, 1e-13));
        assert!(close(ln_gamma(5.0).exp(), 24.0, 1e-13));
        assert!(close(
            ln_gamma(0.5).exp(),
            std::f64::consts::PI.sqrt(),
            1e-13
        ));
        assert!(close(ln_gamma(171.0), 706.573_062_245_787_4, 1e-13));
    }

    #[test]
    fn sketch_quantiles_are_within_the_stated_error_of_nearest_rank() {
        let mut values: Vec<i64> = (0..1000)
            .map(|i| (i * i * 37 + 11) % 9_000_000_000)
            .collect();
        values.push(0);
        let mut s = Sketch::default();
        for v in &values {
            s.add(*v);
        }
        values.sort_unstable();
        for q in [0.5, 0.9, 0.99, 1.0, 0.001] {
            let rank = ((q * values.len() as f64).ceil() as usize).max(1);
            let exact = values[rank - 1] as f64;
            let got = s.quantile(q).unwrap();
            assert!(
                close(got, exact, SKETCH_RELATIVE_ERROR),
                "q {q}: {got} vs {exact}"
            );
        }
        assert_eq!(Sketch::default().quantile(0.5), None);
        let mut z = Sketch::default();
        z.add(0);
        assert_eq!(z.quantile(0.99), Some(0.0));
        let mut m = Sketch::default();
        m.merge(&s);
        assert_eq!(m, s);
    }
}
