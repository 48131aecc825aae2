//! MongoDB regular expressions (PCRE syntax and options) translated for the
//! `regex` crate. Pure text logic below the filter (`$regex`) and the
//! expression operators (`$regexMatch`, `$regexFind`, `$regexFindAll`),
//! which both compile through [`compile_regex`].

use crate::error::{Error, ErrorCode, Result};

/// The longest pattern MongoDB takes (`RegexMatchExpression::
/// kMaxPatternSize`), in bytes.
pub(crate) const MAX_PATTERN_BYTES: usize = 32764;

/// Most bytes one compiled regex may take; a short pattern with nested
/// counted repetitions (`(\w{500}){500}`) would otherwise compile into
/// gigabytes.
const MAX_COMPILED_BYTES: usize = 1 << 22;

/// Most bytes of the lazy DFA's state cache per regex and search; past
/// it the search goes on in a slower engine, still in linear time.
const MAX_DFA_CACHE_BYTES: usize = 1 << 21;

/// Compiles a MongoDB (PCRE) regex for the `regex` crate, translating what
/// differs and rejecting what the crate cannot do (lookaround,
/// backreferences, atomic groups, possessive quantifiers, recursion).
///
/// Matching costs time linear in the text (the crate has no
/// backtracking), so a pattern's budget is its length and compiled size.
pub(crate) fn compile_regex(pattern: &str, options: &str) -> Result<regex::Regex> {
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(Error::new(
            ErrorCode::BadValue,
            "Regular expression is too long",
        ));
    }
    let mut builder_flags = String::new();
    let mut extended = false;
    let mut multiline = false;
    for flag in options.chars() {
        match flag {
            'i' => builder_flags.push('i'),
            'm' => {
                multiline = true;
                builder_flags.push('m')
            }
            's' => builder_flags.push('s'),
            'x' => {
                extended = true;
                builder_flags.push('x')
            }
            // PCRE is always in UTF-8 mode in MongoDB; `u` changes nothing.
            'u' => {}
            other => {
                return Err(Error::new(
                    ErrorCode::RegexBadOption,
                    format!("invalid flag in regex options: {other}"),
                ))
            }
        }
    }
    let translated = translate_pcre(pattern, extended, multiline)?;
    let full = if builder_flags.is_empty() {
        translated
    } else {
        format!("(?{builder_flags}){translated}")
    };
    regex::RegexBuilder::new(&full)
        .size_limit(MAX_COMPILED_BYTES)
        .dfa_size_limit(MAX_DFA_CACHE_BYTES)
        .build()
        .map_err(|e| regex_error(&e.to_string()))
}

fn regex_error(detail: &str) -> Error {
    Error::new(
        ErrorCode::RegexInvalid,
        format!("Regular expression is invalid: {detail}"),
    )
}

fn unsupported(construct: &str) -> Error {
    regex_error(&format!("{construct} are not supported"))
}

/// Rewrites PCRE syntax into `regex` crate syntax.
fn translate_pcre(pattern: &str, extended: bool, multiline: bool) -> Result<String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() + 8);
    // PCRE's `$` without `m` also matches before a final newline; inline
    // flag groups could switch `m` on, so only rewrite when there are none.
    let rewrite_dollar = !multiline && !pattern.contains("(?");
    let mut i = 0;
    let mut in_class = false;
    // True right after a quantifier, to spot possessive `++`, `*+`, `?+`.
    let mut after_quantifier = false;
    while i < chars.len() {
        let c = chars[i];
        if in_class {
            match c {
                '\\' => {
                    i += 1;
                    let Some(&e) = chars.get(i) else {
                        return Err(regex_error("\\ at end of pattern"));
                    };
                    match e {
                        'd' => out.push_str("0-9"),
                        'w' => out.push_str("0-9A-Za-z_"),
                        's' => out.push_str("\\t\\n\\x0B\\x0C\\r "),
                        'h' => out.push_str("\\t \\xA0"),
                        'v' => out.push_str("\\n\\x0B\\x0C\\r\\x{85}\\x{2028}\\x{2029}"),
                        _ => {
                            push_escape(&mut out, e)?;
                            i = copy_braced_argument(&chars, i, e, &mut out);
                        }
                    }
                }
                ']' => {
                    in_class = false;
                    out.push(']');
                }
                '[' if chars.get(i + 1) == Some(&':') => {
                    // A POSIX class such as [:alpha:] passes through.
                    let rest: String = chars[i..].iter().collect();
                    match rest.find(":]") {
                        Some(end) => {
                            out.push_str(&rest[..end + 2]);
                            i += rest[..end + 2].chars().count();
                            continue;
                        }
                        None => out.push_str("\\["),
                    }
                }
                // Set operators and nested classes in the `regex` crate,
                // plain characters in PCRE.
                '[' | '&' | '~' => {
                    out.push('\\');
                    out.push(c);
                }
                '-' if chars.get(i + 1) == Some(&'-') => out.push_str("\\-"),
                ' ' | '#' if extended => {
                    // PCRE's `x` leaves classes alone; the crate's does not.
                    out.push_str(if c == ' ' { "\\x20" } else { "\\#" });
                }
                _ => out.push(c),
            }
            i += 1;
            continue;
        }
        let was_quantifier = after_quantifier;
        after_quantifier = false;
        match c {
            '\\' => {
                i += 1;
                let Some(&e) = chars.get(i) else {
                    return Err(regex_error("\\ at end of pattern"));
                };
                match e {
                    'd' => out.push_str("[0-9]"),
                    'D' => out.push_str("[^0-9]"),
                    'w' => out.push_str("[0-9A-Za-z_]"),
                    'W' => out.push_str("[^0-9A-Za-z_]"),
                    's' => out.push_str("[\\t\\n\\x0B\\x0C\\r ]"),
                    'S' => out.push_str("[^\\t\\n\\x0B\\x0C\\r ]"),
                    'h' => out.push_str("[\\t \\xA0]"),
                    'H' => out.push_str("[^\\t \\xA0]"),
                    'v' => out.push_str("[\\n\\x0B\\x0C\\r\\x{85}\\x{2028}\\x{2029}]"),
                    'V' => out.push_str("[^\\n\\x0B\\x0C\\r\\x{85}\\x{2028}\\x{2029}]"),
                    'Z' => out.push_str("(?:\\n?\\z)"),
                    'A' | 'z' | 'b' | 'B' => {
                        out.push('\\');
                        out.push(e);
                    }
                    'Q' => {
                        // \Q...\E quotes literally.
                        i += 1;
                        while i < chars.len() {
                            if chars[i] == '\\' && chars.get(i + 1) == Some(&'E') {
                                i += 1;
                                break;
                            }
                            out.push_str(&format!("\\x{{{:X}}}", chars[i] as u32));
                            i += 1;
                        }
                    }
                    'E' => {}
                    '1'..='9' => return Err(unsupported("backreferences")),
                    'g' | 'k' => return Err(unsupported("backreferences")),
                    'G' | 'K' | 'R' | 'X' | 'C' => {
                        return Err(regex_error(&format!("\\{e} is not supported")))
                    }
                    _ => {
                        push_escape(&mut out, e)?;
                        i = copy_braced_argument(&chars, i, e, &mut out);
                    }
                }
            }
            '[' => {
                in_class = true;
                out.push('[');
                if chars.get(i + 1) == Some(&'^') {
                    out.push('^');
                    i += 1;
                }
                // A `]` right after the opening bracket is a literal.
                if chars.get(i + 1) == Some(&']') {
                    out.push_str("\\]");
                    i += 1;
                }
            }
            '(' => {
                if chars.get(i + 1) == Some(&'*') {
                    return Err(regex_error("(*VERB) directives are not supported"));
                }
                if chars.get(i + 1) == Some(&'?') {
                    let next = chars.get(i + 2).copied();
                    let after = chars.get(i + 3).copied();
                    match (next, after) {
                        (Some('='), _) | (Some('!'), _) => {
                            return Err(unsupported("lookahead assertions"))
                        }
                        (Some('<'), Some('=')) | (Some('<'), Some('!')) => {
                            return Err(unsupported("lookbehind assertions"))
                        }
                        (Some('>'), _) => return Err(unsupported("atomic groups")),
                        (Some('|'), _) => return Err(unsupported("branch reset groups")),
                        (Some('('), _) => return Err(unsupported("conditional groups")),
                        (Some('R'), _)
                        | (Some('&'), _)
                        | (Some('0'..='9'), _)
                        | (Some('+'), _)
                        | (Some('-'), Some('0'..='9')) => {
                            return Err(unsupported("recursive patterns"))
                        }
                        (Some('P'), Some('=')) => return Err(unsupported("backreferences")),
                        (Some('P'), Some('>')) => return Err(unsupported("recursive patterns")),
                        (Some('#'), _) => {
                            // A comment group: drop it.
                            while i < chars.len() && chars[i] != ')' {
                                i += 1;
                            }
                            i += 1;
                            continue;
                        }
                        (Some('\''), _) => {
                            // (?'name'...) is (?P<name>...).
                            let start = i + 3;
                            let Some(len) = chars[start..].iter().position(|&c| c == '\'') else {
                                return Err(regex_error("unterminated group name"));
                            };
                            let name: String = chars[start..start + len].iter().collect();
                            out.push_str(&format!("(?P<{name}>"));
                            i = start + len + 1;
                            continue;
                        }
                        _ => out.push('('),
                    }
                } else {
                    out.push('(');
                }
            }
            '*' | '+' | '?' => {
                if c == '+' && was_quantifier {
                    return Err(unsupported("possessive quantifiers"));
                }
                out.push(c);
                // `??`, `*?`, `+?` are lazy quantifiers, not new ones.
                after_quantifier = !(c == '?' && was_quantifier);
            }
            '{' => match repetition_len(&chars[i..]) {
                Some(len) => {
                    out.extend(&chars[i..i + len]);
                    i += len;
                    after_quantifier = true;
                    continue;
                }
                None => out.push_str("\\{"),
            },
            '}' => out.push_str("\\}"),
            '$' if rewrite_dollar => out.push_str("(?:\\n?\\z)"),
            '#' if extended => {
                // A comment to the end of the line.
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            _ => out.push(c),
        }
        i += 1;
    }
    if in_class {
        return Err(regex_error("missing terminating ] for character class"));
    }
    Ok(out)
}

/// After `\p`, `\P` or `\x` at `i`, copies a `{...}` argument
/// (`\p{L}`, `\x{263A}`) through; returns the index of the last
/// character consumed.
fn copy_braced_argument(chars: &[char], i: usize, escape: char, out: &mut String) -> usize {
    if !matches!(escape, 'p' | 'P' | 'x') || chars.get(i + 1) != Some(&'{') {
        return i;
    }
    match chars[i + 1..].iter().position(|&c| c == '}') {
        Some(len) => {
            out.extend(&chars[i + 1..=i + 1 + len]);
            i + 1 + len
        }
        None => i,
    }
}

/// An escaped character: letters the crate knows pass through; other
/// characters become literal code points, which mean the same in every mode.
fn push_escape(out: &mut String, e: char) -> Result<()> {
    match e {
        'n' | 't' | 'r' | 'f' | 'd' | 'D' | 'w' | 'W' | 's' | 'S' | 'p' | 'P' | 'x' | 'b' | 'B'
        | 'A' | 'z' => {
            out.push('\\');
            out.push(e);
        }
        'a' => out.push_str("\\x07"),
        'e' => out.push_str("\\x1B"),
        '0' => out.push_str("\\x00"),
        c if c.is_ascii_alphanumeric() => {
            return Err(regex_error(&format!("unrecognized escape \\{c}")))
        }
        c => out.push_str(&format!("\\x{{{:X}}}", c as u32)),
    }
    Ok(())
}

/// The length of a `{n}`, `{n,}` or `{n,m}` repetition at the start of
/// `chars`, or `None` when PCRE would read the brace literally.
fn repetition_len(chars: &[char]) -> Option<usize> {
    let end = chars.iter().position(|&c| c == '}')?;
    let body: String = chars[1..end].iter().collect();
    let (min, max) = match body.split_once(',') {
        Some((a, b)) => (a, Some(b)),
        None => (body.as_str(), None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let valid = digits(min) && max.is_none_or(|m| m.is_empty() || digits(m));
    valid.then_some(end + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_patterns_and_huge_compiled_ones_are_refused() {
        let longest = "a".repeat(MAX_PATTERN_BYTES);
        assert!(compile_regex(&longest, "").is_ok());
        let too_long = compile_regex(&format!("{longest}a"), "").unwrap_err();
        assert_eq!(too_long.code, ErrorCode::BadValue);
        assert_eq!(too_long.message, "Regular expression is too long");
        let huge = compile_regex("(\\w{500}){500}", "").unwrap_err();
        assert_eq!(huge.code, ErrorCode::RegexInvalid);
    }

    #[test]
    fn common_patterns_compile() {
        for (pattern, subject) in [
            ("^\\d{3}-\\d{4}$", "555-1234"),
            ("[\\w.+-]+@[\\w-]+\\.[\\w.]+", "a.b+c@x-y.com"),
            ("^(?:abc|def)$", "def"),
            ("\\bword\\b", "a word here"),
            ("colou?r", "color"),
            ("[^\\s]+", "x"),
            ("\\p{L}+", "é"),
            ("^[A-Z][a-z]*$", "Hello"),
            ("x{2,}", "xxx"),
            ("a\\tb", "a\tb"),
            ("\\x41", "A"),
            ("[\\d-]+", "1-2"),
            ("[$]", "$"),
            ("\\$5", "$5"),
            ("^.*$", ""),
            ("(a)(?:b)(?<n>c)", "abc"),
            ("[a-z&&]", "&"),
            ("a{1,2}?", "a"),
            ("[\\]]", "]"),
        ] {
            let re = compile_regex(pattern, "").unwrap_or_else(|e| panic!("{pattern}: {e}"));
            assert!(re.is_match(subject), "{pattern} on {subject:?}");
        }
    }
}
