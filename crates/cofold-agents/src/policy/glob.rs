//! The rule glob: `*` is any run of characters (`/` and newlines included), `?` exactly one
//! character, everything else literal, anchored to the whole subject.

/// Whether `pattern` matches the whole of `subject`.
///
/// Greedy matching with one remembered star position: on a mismatch the last `*` takes one more
/// character. That is O(pattern × subject) at worst and never backtracks exponentially.
pub fn match_glob(pattern: &str, subject: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let subject: Vec<char> = subject.chars().collect();
    let (mut p, mut s) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while s < subject.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, s));
                p += 1;
            }
            Some(&c) if c == '?' || c == subject[s] => {
                p += 1;
                s += 1;
            }
            _ => match star {
                Some((star_p, star_s)) => {
                    p = star_p + 1;
                    s = star_s + 1;
                    star = Some((star_p, star_s + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::match_glob;

    #[test]
    fn examples_of_the_spec() {
        assert!(match_glob("rm *", "rm -rf /"));
        assert!(!match_glob("rm *", "sudo rm -rf /"));
        assert!(match_glob("*.ts", "src/a.ts"));
        assert!(!match_glob("*.ts", "src/a.tsx"));
        assert!(match_glob("a?c", "abc"));
        assert!(!match_glob("a?c", "ac"));
        assert!(!match_glob("a?c", "abbc"));
        assert!(match_glob("", ""));
        assert!(!match_glob("", "a"));
        assert!(match_glob("*", ""));
        assert!(match_glob("*", "a\nb/c"));
        assert!(match_glob("?", "é"));
    }

    #[test]
    fn many_stars_stay_fast() {
        let pattern = "*a".repeat(30) + "b";
        let subject = "a".repeat(5000);
        assert!(!match_glob(&pattern, &subject));
    }
}
