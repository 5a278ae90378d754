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

    /// The obvious recursive definition, exponential but fine for short strings.
    fn reference(pattern: &[char], subject: &[char]) -> bool {
        match pattern.split_first() {
            None => subject.is_empty(),
            Some(('*', rest)) => (0..=subject.len()).any(|skip| reference(rest, &subject[skip..])),
            Some((&c, rest)) => match subject.split_first() {
                Some((&s, tail)) if c == '?' || c == s => reference(rest, tail),
                _ => false,
            },
        }
    }

    fn all_strings(alphabet: &[char], max_len: usize) -> Vec<String> {
        let mut out = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..max_len {
            last = last
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            out.extend(last.iter().cloned());
        }
        out
    }

    #[test]
    fn agrees_with_the_reference_on_every_short_case() {
        let patterns = all_strings(&['a', 'b', '*', '?'], 4);
        let subjects = all_strings(&['a', 'b'], 4);
        for pattern in &patterns {
            let p: Vec<char> = pattern.chars().collect();
            for subject in &subjects {
                let s: Vec<char> = subject.chars().collect();
                assert_eq!(
                    match_glob(pattern, subject),
                    reference(&p, &s),
                    "{pattern:?} against {subject:?}"
                );
            }
        }
    }

    #[test]
    fn many_stars_stay_fast() {
        let pattern = "*a".repeat(30) + "b";
        let subject = "a".repeat(5000);
        assert!(!match_glob(&pattern, &subject));
    }
}
