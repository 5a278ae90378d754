//! Reading a Rust file just far enough to see its module structure: which file modules it
//! declares and which paths inside its crate it names. Comments and literals are skipped, so a
//! doc link or a path in a string is not taken for a dependency.

/// One token of Rust source, as far as paths are concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tok {
    /// An identifier or keyword (a raw identifier without its `r#`).
    Ident(String),
    /// `::`.
    Sep,
    /// Any other punctuation character.
    Punct(char),
}

/// The tokens of `src`, without comments, string, character and number literals, and lifetimes.
pub(crate) fn tokens(src: &str) -> Vec<Tok> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            _ if c.is_ascii_whitespace() => i += 1,
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => i = skip_block_comment(b, i),
            b'"' => i = skip_string(b, i + 1),
            b'\'' => i = skip_quote(b, i),
            b':' if b.get(i + 1) == Some(&b':') => {
                out.push(Tok::Sep);
                i += 2;
            }
            _ if c.is_ascii_digit() => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
            }
            _ if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 => {
                if let Some(next) = skip_prefixed_literal(b, i) {
                    i = next;
                    continue;
                }
                let start = if c == b'r' && b.get(i + 1) == Some(&b'#') {
                    i + 2
                } else {
                    i
                };
                let mut j = start;
                while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] >= 0x80)
                {
                    j += 1;
                }
                out.push(Tok::Ident(
                    String::from_utf8_lossy(&b[start..j]).into_owned(),
                ));
                i = j.max(i + 1);
            }
            _ => {
                out.push(Tok::Punct(c as char));
                i += 1;
            }
        }
    }
    out
}

fn skip_block_comment(b: &[u8], mut i: usize) -> usize {
    let mut depth = 0usize;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            depth += 1;
            i += 2;
        } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    i
}

/// Past the closing quote of a string whose opening quote is just before `i`.
fn skip_string(b: &[u8], mut i: usize) -> usize {
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// Past a raw string `r#*"…"#*` whose `r` (or `br`, `cr`) ends just before `i`.
fn skip_raw_string(b: &[u8], mut i: usize) -> usize {
    let mut hashes = 0;
    while b.get(i) == Some(&b'#') {
        hashes += 1;
        i += 1;
    }
    i += 1; // the opening quote
    while i < b.len() {
        if b[i] == b'"'
            && b[i + 1..]
                .iter()
                .take(hashes)
                .filter(|&&h| h == b'#')
                .count()
                == hashes
        {
            return i + 1 + hashes;
        }
        i += 1;
    }
    i
}

/// A string with a prefix (`b"…"`, `r"…"`, `br#"…"#`, `c"…"`, `b'x'`) starting at `i`: where it
/// ends, or `None` when `i` starts an identifier.
fn skip_prefixed_literal(b: &[u8], i: usize) -> Option<usize> {
    let rest = &b[i..];
    let raw_at = |k: usize| {
        rest.get(k) == Some(&b'r') && {
            let mut h = k + 1;
            while rest.get(h) == Some(&b'#') {
                h += 1;
            }
            rest.get(h) == Some(&b'"')
        }
    };
    if raw_at(0) {
        return Some(skip_raw_string(b, i + 1));
    }
    if matches!(rest.first(), Some(b'b' | b'c')) {
        if raw_at(1) {
            return Some(skip_raw_string(b, i + 2));
        }
        match rest.get(1) {
            Some(b'"') => return Some(skip_string(b, i + 2)),
            Some(b'\'') if rest.first() == Some(&b'b') => return Some(skip_quote(b, i + 1)),
            _ => {}
        }
    }
    None
}

/// Past a character literal or a lifetime starting at the quote at `i`.
fn skip_quote(b: &[u8], i: usize) -> usize {
    if b.get(i + 1) == Some(&b'\\') {
        let mut j = i + 2;
        while j < b.len() && b[j] != b'\'' {
            j += 1;
        }
        return j + 1;
    }
    // One character (possibly several bytes of UTF-8) and a closing quote: a character literal.
    let mut j = i + 1;
    if j < b.len() {
        j += 1;
        while j < b.len() && (b[j] & 0xC0) == 0x80 {
            j += 1;
        }
    }
    if b.get(j) == Some(&b'\'') {
        return j + 1;
    }
    // A lifetime or a label: its name is skipped with it.
    let mut j = i + 1;
    while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
        j += 1;
    }
    j
}

/// A path a file names, as written, in the module it was written in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Named {
    /// The inline modules (`mod tests { … }`) around it, outermost first.
    pub(crate) inline: Vec<String>,
    /// Its segments (`crate`, `super`, `self` included as written).
    pub(crate) path: Vec<String>,
    /// For a `use`, the name it brings into scope (`None` for a glob).
    pub(crate) alias: Option<String>,
}

/// What one file says about modules. Test code (a module under `#[cfg(test)]`, inline or in its
/// own file) is left out: it is not part of what the crate builds.
#[derive(Debug, Default)]
pub(crate) struct FileFacts {
    /// The file modules it declares (`mod x;`), outside inline modules.
    pub(crate) declared: Vec<String>,
    /// Every path it names that could be inside its crate.
    pub(crate) named: Vec<Named>,
}

/// The module declarations and paths of one file.
pub(crate) fn facts(src: &str) -> FileFacts {
    let toks = tokens(src);
    let mut facts = FileFacts::default();
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Tok::Ident(kw) if kw == "mod" => {
                if let Some(Tok::Ident(name)) = toks.get(i + 1) {
                    let test_only = under_cfg_test(&toks, i);
                    match toks.get(i + 2) {
                        Some(Tok::Punct(';')) if inline.is_empty() && !test_only => {
                            facts.declared.push(name.clone())
                        }
                        Some(Tok::Punct('{')) if test_only => {
                            i = past_block(&toks, i + 2);
                            continue;
                        }
                        Some(Tok::Punct('{')) => {
                            inline.push((name.clone(), depth + 1));
                            depth += 1;
                            i += 3;
                            continue;
                        }
                        _ => {}
                    }
                }
            }
            Tok::Ident(kw) if kw == "use" => {
                let names: Vec<String> = inline.iter().map(|(n, _)| n.clone()).collect();
                let mut j = i + 1;
                if toks.get(j) == Some(&Tok::Sep) {
                    j += 1; // `use ::extern_crate`
                    while j < toks.len() && toks[j] != Tok::Punct(';') {
                        j += 1;
                    }
                    i = j;
                    continue;
                }
                let mut trees = Vec::new();
                j = use_tree(&toks, j, Vec::new(), &mut trees);
                for (path, alias) in trees {
                    facts.named.push(Named {
                        inline: names.clone(),
                        path,
                        alias,
                    });
                }
                i = j;
                continue;
            }
            Tok::Ident(head) if toks.get(i + 1) == Some(&Tok::Sep) => {
                let after_dollar = i > 0 && toks[i - 1] == Tok::Punct('$');
                let continues = i > 0 && toks[i - 1] == Tok::Sep;
                if !after_dollar && !continues {
                    let mut path = vec![head.clone()];
                    let mut j = i + 1;
                    while toks.get(j) == Some(&Tok::Sep) {
                        match toks.get(j + 1) {
                            Some(Tok::Ident(s)) => {
                                path.push(s.clone());
                                j += 2;
                            }
                            _ => break,
                        }
                    }
                    let names = inline.iter().map(|(n, _)| n.clone()).collect();
                    facts.named.push(Named {
                        inline: names,
                        path,
                        alias: None,
                    });
                    i = j;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    facts
}

/// Whether the item whose keyword is at `at` (after any visibility) carries `#[cfg(test)]`.
fn under_cfg_test(toks: &[Tok], at: usize) -> bool {
    let mut i = at;
    // Visibility: `pub`, `pub(crate)`, `pub(super)`, `pub(in path)`.
    if i >= 1 && toks[i - 1] == Tok::Punct(')') {
        while i > 0 && toks[i - 1] != Tok::Punct('(') {
            i -= 1;
        }
        i = i.saturating_sub(1);
    }
    if i >= 1 && toks[i - 1] == Tok::Ident("pub".to_owned()) {
        i -= 1;
    }
    let test = [
        Tok::Ident("cfg".to_owned()),
        Tok::Punct('('),
        Tok::Ident("test".to_owned()),
        Tok::Punct(')'),
    ];
    // Attributes, nearest first: `# [ … ]`.
    while i >= 1 && toks[i - 1] == Tok::Punct(']') {
        let end = i - 1;
        let mut depth = 0usize;
        let mut j = end;
        loop {
            match toks[j] {
                Tok::Punct(']') => depth += 1,
                Tok::Punct('[') => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            if j == 0 {
                return false;
            }
            j -= 1;
        }
        if j == 0 || toks[j - 1] != Tok::Punct('#') {
            return false;
        }
        if toks[j + 1..end] == test {
            return true;
        }
        i = j - 1;
    }
    false
}

/// Past the block whose `{` is at `open`.
fn past_block(toks: &[Tok], open: usize) -> usize {
    let mut depth = 0usize;
    let mut i = open;
    while i < toks.len() {
        match toks[i] {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// Reads one use tree at `i` under `prefix`, pushing every full path with the name it binds;
/// returns the index past the tree (past the `;` at the top level).
fn use_tree(
    toks: &[Tok],
    mut i: usize,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) -> usize {
    let mut path = prefix;
    loop {
        match toks.get(i) {
            Some(Tok::Ident(s)) => {
                path.push(s.clone());
                i += 1;
                match toks.get(i) {
                    Some(Tok::Sep) => i += 1,
                    Some(Tok::Ident(kw)) if kw == "as" => {
                        let alias = match toks.get(i + 1) {
                            Some(Tok::Ident(a)) if a != "_" => Some(a.clone()),
                            _ => None,
                        };
                        out.push((path, alias));
                        return end_of_tree(toks, i + 2);
                    }
                    _ => {
                        let last = path.last().cloned();
                        if last.as_deref() == Some("self") {
                            path.pop();
                            let alias = path.last().cloned();
                            out.push((path, alias));
                        } else {
                            out.push((path, last));
                        }
                        return end_of_tree(toks, i);
                    }
                }
            }
            Some(Tok::Punct('*')) => {
                out.push((path, None));
                return end_of_tree(toks, i + 1);
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                loop {
                    match toks.get(i) {
                        Some(Tok::Punct('}')) => {
                            return end_of_tree(toks, i + 1);
                        }
                        Some(Tok::Punct(',')) => i += 1,
                        None => return i,
                        _ => i = use_tree(toks, i, path.clone(), out),
                    }
                }
            }
            _ => return end_of_tree(toks, i),
        }
    }
}

/// After a tree: past a `;` that ends the statement; stops before `,` and `}` of a group.
fn end_of_tree(toks: &[Tok], i: usize) -> usize {
    match toks.get(i) {
        Some(Tok::Punct(';')) => i + 1,
        _ => i,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(src: &str) -> Vec<String> {
        facts(src).named.iter().map(|n| n.path.join("::")).collect()
    }

    #[test]
    fn comments_strings_and_lifetimes_hide_nothing_else() {
        let src = r####"
            //! A link to [`crate::doc_only`].
            /* crate::in_block /* nested */ crate::still_in_block */
            fn f<'a>(x: &'a str) -> char { let _ = "crate::in_string"; let _ = r#"crate::raw"#; 'x' }
            fn g() { crate::real::call(); b"crate::bytes"; '\''; }
        "####;
        assert_eq!(paths(src), ["crate::real::call"]);
    }

    #[test]
    fn grouped_uses_bind_their_last_names() {
        let f = facts(
            "use crate::{a::{b, c::D}, e::{self, F as G}, h::*};\nmod x;\nmod y { use super::z; }",
        );
        let got: Vec<(String, Option<String>)> = f
            .named
            .iter()
            .map(|n| (n.path.join("::"), n.alias.clone()))
            .collect();
        assert_eq!(
            got,
            [
                ("crate::a::b".to_owned(), Some("b".to_owned())),
                ("crate::a::c::D".to_owned(), Some("D".to_owned())),
                ("crate::e".to_owned(), Some("e".to_owned())),
                ("crate::e::F".to_owned(), Some("G".to_owned())),
                ("crate::h".to_owned(), None),
                ("super::z".to_owned(), Some("z".to_owned())),
            ]
        );
        assert_eq!(f.declared, ["x"]);
        assert_eq!(f.named[5].inline, ["y"]);
    }

    #[test]
    fn test_modules_are_left_out() {
        let f = facts(concat!(
            "mod a;\n#[cfg(test)]\nmod t;\n",
            "#[cfg(test)]\n#[allow(x)]\npub(crate) mod inline { use crate::b; }\nuse crate::c;",
        ));
        assert_eq!(f.declared, ["a"]);
        let got: Vec<String> = f.named.iter().map(|n| n.path.join("::")).collect();
        assert_eq!(got, ["crate::c"]);
    }

    #[test]
    fn macro_crate_paths_are_not_this_crates() {
        assert!(paths("macro_rules! m { () => { $crate::x::y() } }").is_empty());
    }
}
