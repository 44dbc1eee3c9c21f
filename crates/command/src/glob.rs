//! Glob matching exactly like Redis `stringmatchlen` (util.c, Redis 7.0).
//!
//! KEYS, SCAN MATCH and CONFIG GET use it; clients rely on its corner cases (`\` escapes,
//! `[^a-z]`, an unterminated `[` matching its content, ranges given backwards), so this is a
//! line-by-line port rather than a "cleaner" matcher. The C code reads one byte past the end
//! of the pattern (the sds terminator, `\0`); [`at`] returns 0 there to reproduce that.
//!
//! Bounds: recursion only happens on `*`, is cut at depth 1000 like Redis (abusive patterns
//! such as `a*a*a*...*b`), and `skip_longer` stops the exponential back-tracking: once the
//! rest of the pattern failed from every later position, no earlier `*` can help.

fn at(s: &[u8], i: usize) -> u8 {
    s.get(i).copied().unwrap_or(0)
}

/// True when `string` matches the glob `pattern`. `nocase` folds ASCII case.
pub fn string_match(pattern: &[u8], string: &[u8], nocase: bool) -> bool {
    let mut skip_longer = false;
    match_impl(pattern, string, nocase, &mut skip_longer, 0)
}

fn lower(c: u8, nocase: bool) -> u8 {
    if nocase {
        c.to_ascii_lowercase()
    } else {
        c
    }
}

fn match_impl(pat: &[u8], s: &[u8], nocase: bool, skip_longer: &mut bool, nesting: u32) -> bool {
    if nesting > 1000 {
        return false;
    }
    let (mut p, mut si) = (0usize, 0usize);
    // `p <= pat.len()` always; the remaining pattern length is `pat.len() - p`.
    while p < pat.len() && si < s.len() {
        match pat[p] {
            b'*' => {
                while p < pat.len() && at(pat, p + 1) == b'*' {
                    p += 1;
                }
                if pat.len() - p == 1 {
                    return true;
                }
                while si < s.len() {
                    if match_impl(&pat[p + 1..], &s[si..], nocase, skip_longer, nesting + 1) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    si += 1;
                }
                *skip_longer = true;
                return false;
            }
            b'?' => {
                si += 1;
            }
            b'[' => {
                p += 1;
                let not = at(pat, p) == b'^';
                if not {
                    p += 1;
                }
                let mut matched = false;
                let c0 = s[si];
                loop {
                    let plen = pat.len() - p;
                    if at(pat, p) == b'\\' && plen >= 2 {
                        p += 1;
                        if at(pat, p) == c0 {
                            matched = true;
                        }
                    } else if at(pat, p) == b']' {
                        break;
                    } else if plen == 0 {
                        p -= 1;
                        break;
                    } else if plen >= 3 && at(pat, p + 1) == b'-' {
                        let (mut start, mut end) = (at(pat, p), at(pat, p + 2));
                        if start > end {
                            std::mem::swap(&mut start, &mut end);
                        }
                        let (start, end, c) =
                            (lower(start, nocase), lower(end, nocase), lower(c0, nocase));
                        p += 2;
                        if c >= start && c <= end {
                            matched = true;
                        }
                    } else if lower(at(pat, p), nocase) == lower(c0, nocase) {
                        matched = true;
                    }
                    p += 1;
                }
                if not {
                    matched = !matched;
                }
                if !matched {
                    return false;
                }
                si += 1;
            }
            c => {
                let mut c = c;
                if c == b'\\' && pat.len() - p >= 2 {
                    p += 1;
                    c = pat[p];
                }
                if lower(c, nocase) != lower(s[si], nocase) {
                    return false;
                }
                si += 1;
            }
        }
        p += 1;
        if si == s.len() {
            while at(pat, p) == b'*' && p < pat.len() {
                p += 1;
            }
            break;
        }
    }
    p >= pat.len() && si == s.len()
}

#[cfg(test)]
mod tests {
    use super::string_match as m;

    #[test]
    fn redis_cases() {
        assert!(m(b"*", b"anything", false));
        // Redis quirk kept: the loop never runs on an empty string, so "*" does not match "".
        // (KEYS * and SCAN MATCH * short-circuit before matching, as in Redis.)
        assert!(!m(b"*", b"", false));
        assert!(m(b"h?llo", b"hello", false));
        assert!(!m(b"h?llo", b"hllo", false));
        assert!(m(b"h*llo", b"heeeello", false));
        assert!(m(b"h[ae]llo", b"hallo", false));
        assert!(!m(b"h[ae]llo", b"hillo", false));
        assert!(m(b"h[^e]llo", b"hallo", false));
        assert!(!m(b"h[^e]llo", b"hello", false));
        assert!(m(b"h[a-b]llo", b"hbllo", false));
        assert!(
            m(b"h[b-a]llo", b"hallo", false),
            "ranges given backwards are swapped"
        );
        assert!(m(b"h\\*llo", b"h*llo", false));
        assert!(!m(b"h\\*llo", b"hello", false));
        assert!(m(b"a[", b"a", false) == m(b"a[", b"a", false));
        assert!(m(b"HELLO", b"hello", true));
        assert!(!m(b"HELLO", b"hello", false));
        assert!(m(b"a*", b"a", false));
        assert!(m(b"a**", b"a", false));
        assert!(!m(b"", b"a", false));
        assert!(m(b"", b"", false));
        // Unterminated class: the content still matches the character.
        assert!(m(b"[abc", b"a", false));
        // Pathological pattern terminates quickly thanks to skip_longer.
        let pat = b"a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b";
        assert!(!m(pat, &[b'a'; 200], false));
    }
}
