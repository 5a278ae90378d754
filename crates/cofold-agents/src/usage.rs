//! Token usage sums and cost in integer micro-dollars.
//!
//! Cost is kept as whole micro-dollars while a run counts, so many small steps never drift; the
//! USD figure on records and outcomes is derived from it only when written.

use crate::model::{ModelPricing, Usage};

/// No tokens at all: 0 in, 0 out, no optional counters.
pub const ZERO_USAGE: Usage = Usage {
    input_tokens: 0,
    output_tokens: 0,
    cache_read_tokens: None,
    cache_write_tokens: None,
    reasoning_tokens: None,
};

/// Adds two usages. An optional counter is present in the sum when either side has it, the
/// missing side counting 0.
pub fn add_usage(a: &Usage, b: &Usage) -> Usage {
    fn opt(x: Option<u64>, y: Option<u64>) -> Option<u64> {
        match (x, y) {
            (None, None) => None,
            (x, y) => Some(x.unwrap_or(0) + y.unwrap_or(0)),
        }
    }
    Usage {
        input_tokens: a.input_tokens + b.input_tokens,
        output_tokens: a.output_tokens + b.output_tokens,
        cache_read_tokens: opt(a.cache_read_tokens, b.cache_read_tokens),
        cache_write_tokens: opt(a.cache_write_tokens, b.cache_write_tokens),
        reasoning_tokens: opt(a.reasoning_tokens, b.reasoning_tokens),
    }
}

/// The cost of `usage` at `pricing`, in micro-dollars, rounded to the nearest integer.
///
/// Cached prompt tokens are billed at their own rate (or the input rate when the model has
/// none) and are taken out of the plain input count, which never goes below zero.
pub fn cost_of(usage: &Usage, pricing: &ModelPricing) -> u64 {
    let cache_read = usage.cache_read_tokens.unwrap_or(0);
    let cache_write = usage.cache_write_tokens.unwrap_or(0);
    let plain = usage
        .input_tokens
        .saturating_sub(cache_read)
        .saturating_sub(cache_write);
    let input_rate = pricing.input_per_million;
    // Rates are per million tokens and the result is in millionths of a dollar, so the two
    // factors of a million cancel: tokens × rate is already micro-dollars.
    let micros = plain as f64 * input_rate
        + cache_read as f64 * pricing.cache_read_per_million.unwrap_or(input_rate)
        + cache_write as f64 * pricing.cache_write_per_million.unwrap_or(input_rate)
        + usage.output_tokens as f64 * pricing.output_per_million;
    if micros.is_finite() && micros > 0.0 {
        micros.round() as u64
    } else {
        0
    }
}

/// Micro-dollars as the USD value written on records and outcomes.
pub fn micros_to_usd(micros: u64) -> f64 {
    micros as f64 / 1e6
}

/// A USD value read back from a record, as micro-dollars.
pub fn usd_to_micros(usd: f64) -> u64 {
    let micros = (usd * 1e6).round();
    if micros.is_finite() && micros > 0.0 {
        micros as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pricing(input: f64, output: f64) -> ModelPricing {
        ModelPricing {
            input_per_million: input,
            output_per_million: output,
            cache_read_per_million: None,
            cache_write_per_million: None,
            currency: "USD".into(),
        }
    }

    fn usage(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            ..ZERO_USAGE
        }
    }

    #[test]
    fn cost_examples_of_the_spec() {
        assert_eq!(
            micros_to_usd(cost_of(&usage(1_000_000, 500_000), &pricing(3.0, 15.0))),
            10.5
        );
        assert_eq!(
            micros_to_usd(cost_of(&usage(1, 1), &pricing(1.0, 2.0))),
            0.000003
        );
        assert_eq!(cost_of(&usage(1, 0), &pricing(0.3, 0.0)), 0);
        assert_eq!(
            micros_to_usd(cost_of(&usage(7, 0), &pricing(0.3, 0.0))),
            0.000002
        );
        let mut cached = pricing(3.0, 0.0);
        cached.cache_read_per_million = Some(0.3);
        let u = Usage {
            cache_read_tokens: Some(400_000),
            ..usage(1_000_000, 0)
        };
        assert_eq!(micros_to_usd(cost_of(&u, &cached)), 1.92);
    }

    #[test]
    fn plain_input_never_below_zero_and_cache_falls_back_to_input_rate() {
        let u = Usage {
            cache_read_tokens: Some(10),
            cache_write_tokens: Some(10),
            ..usage(5, 0)
        };
        // 10 + 10 cached tokens at the input rate of 1; the plain count is 0, not -15.
        assert_eq!(cost_of(&u, &pricing(1.0, 0.0)), 20);
    }

    #[test]
    fn add_usage_keeps_optional_counters_present_on_either_side() {
        let a = Usage {
            reasoning_tokens: Some(3),
            ..usage(1, 2)
        };
        let b = Usage {
            cache_read_tokens: Some(4),
            ..usage(10, 20)
        };
        let sum = add_usage(&a, &b);
        assert_eq!((sum.input_tokens, sum.output_tokens), (11, 22));
        assert_eq!(sum.reasoning_tokens, Some(3));
        assert_eq!(sum.cache_read_tokens, Some(4));
        assert_eq!(sum.cache_write_tokens, None);
        assert_eq!(add_usage(&ZERO_USAGE, &ZERO_USAGE), ZERO_USAGE);
    }

    #[test]
    fn usd_round_trips_through_micros() {
        assert_eq!(usd_to_micros(0.000006), 6);
        assert_eq!(usd_to_micros(10.5), 10_500_000);
    }
}
