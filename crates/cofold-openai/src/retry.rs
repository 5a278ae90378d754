//! When to try a request again and how long to wait first: exponential backoff with jitter, and
//! the waits servers ask for (`Retry-After` in seconds or as an HTTP date, `x-ratelimit-reset-*`).

use std::time::{Duration, SystemTime};

use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::tool::AbortSignal;
use reqwest::header::HeaderMap;

use crate::failure::{Failure, abort_error, shown};
use crate::settings::RetryPolicy;

/// The backoff before retry `k` (1-based) without jitter: 500 ms × 2^(k-1), at most 30 s.
pub(crate) fn backoff_base(k: u32) -> Duration {
    let ms = 500u64.saturating_mul(1u64 << (k.saturating_sub(1)).min(16));
    Duration::from_millis(ms.min(30_000))
}

/// The backoff with jitter: a random point in the upper half of [`backoff_base`], so clients
/// that failed together do not come back together.
pub(crate) fn backoff(k: u32) -> Duration {
    let base = backoff_base(k);
    let half = base / 2;
    half + half.mul_f64(fastrand::f64())
}

/// The wait a failed answer asks for, from its headers: `Retry-After` first, then the larger
/// of the `x-ratelimit-reset-requests` / `-tokens` values (and a bare `x-ratelimit-reset`).
pub(crate) fn asked_wait(headers: &HeaderMap) -> Option<Duration> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(v) = get("retry-after").and_then(retry_after) {
        return Some(v);
    }
    [
        "x-ratelimit-reset-requests",
        "x-ratelimit-reset-tokens",
        "x-ratelimit-reset",
    ]
    .iter()
    .filter_map(|h| get(h).and_then(reset_value))
    .max()
}

/// A number of seconds a server sent as a wait: none when negative or not a number; one past
/// what a `Duration` holds (`1e30`, `inf`) is the longest wait there is, which no policy
/// allows, so the request ends with the sentence saying so instead of a panic.
fn seconds(secs: f64) -> Option<Duration> {
    if secs.is_nan() || secs < 0.0 {
        return None;
    }
    Some(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
}

/// `Retry-After`: whole (or fractional) seconds, or an HTTP date.
pub(crate) fn retry_after(value: &str) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<f64>() {
        return seconds(secs);
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// A rate-limit reset: OpenAI's and Groq's durations (`1s`, `6m0s`, `20ms`, `1h2m3.5s`), plain
/// seconds, or a Unix time in seconds (a number past the year 2001).
pub(crate) fn reset_value(value: &str) -> Option<Duration> {
    let v = value.trim();
    if let Ok(n) = v.parse::<f64>() {
        if n.is_nan() || n < 0.0 {
            return None;
        }
        if n > 1e9 {
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .ok()?
                .as_secs_f64();
            return seconds((n - now).max(0.0));
        }
        return seconds(n);
    }
    let mut total = 0f64;
    let mut rest = v;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let n: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            _ => return None,
        };
        total += n * factor;
        rest = &rest[unit_end..];
    }
    seconds(total)
}

/// Whether an HTTP status is worth another attempt: 408, 409, 425, 429 and the 5xx family.
/// The rest (400, 401, 403, 404, 422, …) would fail the same way again.
pub(crate) fn status_is_retryable(status: u16) -> bool {
    matches!(status, 408 | 409 | 425 | 429 | 500..=599)
}

/// The attempts of one request: counts them and waits between them.
pub(crate) struct Tries {
    attempt: u32,
    policy: RetryPolicy,
}

impl Tries {
    pub fn new(policy: RetryPolicy) -> Tries {
        Tries { attempt: 1, policy }
    }

    /// After a failed attempt: waits and returns `Ok` when another attempt may follow, else the
    /// error to end with.
    pub async fn again(
        &mut self,
        failure: Failure,
        url: &str,
        signal: &AbortSignal,
    ) -> Result<(), AgentError> {
        let Failure { error, wait } = failure;
        if !error.retryable || error.code == ErrorCode::Aborted {
            return Err(error);
        }
        if self.attempt >= self.policy.max_attempts {
            return Err(error);
        }
        let wait = match wait {
            Some(w) if w > self.policy.max_wait => {
                // A wait past what a clock counts is said as such, not as a 20-digit number.
                let asked = if w == Duration::MAX {
                    "without end".to_owned()
                } else {
                    shown(w)
                };
                let message = format!(
                    "{}; the server asks to wait {asked} before trying again, longer than the {} \
                     this provider allows (maxRetryWaitMs)",
                    error.message,
                    shown(self.policy.max_wait)
                );
                return Err(AgentError { message, ..error });
            }
            Some(w) => w,
            None => backoff(self.attempt),
        };
        tracing::debug!(url, code = %error.code, attempt = self.attempt, wait_ms = wait.as_millis() as u64, "retrying a model request");
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = signal.cancelled() => return Err(abort_error(signal, url)),
        }
        self.attempt += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_half_a_second_with_jitter_in_the_upper_half() {
        assert_eq!(backoff_base(1), Duration::from_millis(500));
        assert_eq!(backoff_base(2), Duration::from_millis(1000));
        assert_eq!(backoff_base(3), Duration::from_millis(2000));
        assert_eq!(backoff_base(40), Duration::from_secs(30));
        for k in 1..6 {
            let b = backoff(k);
            assert!(b >= backoff_base(k) / 2 && b <= backoff_base(k), "{b:?}");
        }
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(retry_after(" 1.5 "), Some(Duration::from_millis(1500)));
        assert_eq!(retry_after("-1"), None);
        let in_ten = SystemTime::now() + Duration::from_secs(10);
        let wait = retry_after(&httpdate::fmt_http_date(in_ten)).expect("a date");
        assert!(wait <= Duration::from_secs(10) && wait >= Duration::from_secs(8));
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("soon"), None);
    }

    #[test]
    fn waits_too_long_for_a_duration_are_the_longest_wait_not_a_panic() {
        for v in ["1e30", "inf", "+infinity", "Infinity", "1.9e19", "1e20"] {
            assert_eq!(retry_after(v), Some(Duration::MAX), "{v}");
            assert_eq!(reset_value(v), Some(Duration::MAX), "{v}");
        }
        for v in ["NaN", "-inf", "-1e30"] {
            assert_eq!(retry_after(v), None, "{v}");
            assert_eq!(reset_value(v), None, "{v}");
        }
        assert_eq!(reset_value("99999999999999999999h"), Some(Duration::MAX));
        assert_eq!(reset_value("1e30s"), None, "not a duration form");
        // The latest date HTTP dates can say is far, but a Duration holds it.
        let far = retry_after("Fri, 31 Dec 9999 23:59:59 GMT").expect("a date");
        assert!(far > Duration::from_secs(200 * 365 * 86_400));
        let mut h = HeaderMap::new();
        h.insert("retry-after", "1e30".parse().expect("value"));
        assert_eq!(asked_wait(&h), Some(Duration::MAX));
    }

    #[tokio::test]
    async fn a_wait_without_end_ends_the_request_with_the_longest_allowed_wait_named() {
        let policy = RetryPolicy {
            max_attempts: 3,
            max_wait: Duration::from_secs(60),
        };
        let mut tries = Tries::new(policy);
        let error = AgentError {
            retryable: true,
            ..AgentError::new(ErrorCode::RateLimit, "the server is busy")
        };
        let failure = Failure {
            error,
            wait: retry_after("1e30"),
        };
        let signal = AbortSignal::default();
        let err = tries
            .again(failure, "http://127.0.0.1/", &signal)
            .await
            .expect_err("no retry after a wait without end");
        assert_eq!(
            err.message,
            "the server is busy; the server asks to wait without end before trying again, longer \
             than the 60 s this provider allows (maxRetryWaitMs)"
        );
    }

    #[test]
    fn reset_values_read_each_servers_form() {
        assert_eq!(reset_value("1s"), Some(Duration::from_secs(1)));
        assert_eq!(reset_value("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(reset_value("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(
            reset_value("1h2m3.5s"),
            Some(Duration::from_secs_f64(3723.5))
        );
        assert_eq!(reset_value("12"), Some(Duration::from_secs(12)));
        assert_eq!(reset_value("3 days"), None);
        let mut h = HeaderMap::new();
        h.insert("x-ratelimit-reset-requests", "2s".parse().expect("value"));
        h.insert("x-ratelimit-reset-tokens", "6m0s".parse().expect("value"));
        assert_eq!(asked_wait(&h), Some(Duration::from_secs(360)));
        h.insert("retry-after", "7".parse().expect("value"));
        assert_eq!(asked_wait(&h), Some(Duration::from_secs(7)));
    }

    #[test]
    fn refusals_are_not_retried() {
        for s in [400, 401, 403, 404, 422] {
            assert!(!status_is_retryable(s));
        }
        for s in [408, 429, 500, 502, 503, 529] {
            assert!(status_is_retryable(s));
        }
    }
}
