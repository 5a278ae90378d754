//! A crate's module graph: one node per file module, an edge where a module names a path in
//! another, and the circles among them.
//!
//! A module's own descendants are part of it, so the edge from a folder's module to the files
//! under it (declaring them, re-exporting them) is not counted; the edge back, from a file to
//! its folder's module, is. A path is resolved through the `use` aliases of the module it passes
//! through, so a name used through a re-export counts against the module that defines it.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};

use super::TidyError;
use super::scan::{FileFacts, facts};

/// One file module.
#[derive(Debug, Clone)]
pub struct Module {
    /// Its file, relative to the workspace root.
    pub file: PathBuf,
    /// The modules it uses (their paths inside the crate; `crate` for the root).
    pub uses: BTreeSet<String>,
}

/// The file modules of one crate target (a library or a binary) and their edges.
#[derive(Debug, Clone)]
pub struct ModuleGraph {
    /// The package's folder name.
    pub package: String,
    /// The target's root file, relative to the workspace root.
    pub root: PathBuf,
    /// Every file module by its path inside the crate (`""` is the root).
    pub modules: BTreeMap<String, Module>,
}

/// The name a module path is shown by.
fn shown(key: &str) -> &str {
    if key.is_empty() { "crate" } else { key }
}

fn key_of(segments: &[String]) -> String {
    segments.join("::")
}

impl ModuleGraph {
    /// Reads the crate whose root file is `root_file` (relative to `workspace`).
    pub fn read(workspace: &Path, package: &str, root_file: &Path) -> Result<Self, TidyError> {
        let mut files: BTreeMap<String, (PathBuf, FileFacts)> = BTreeMap::new();
        let mut queue = VecDeque::from([(Vec::<String>::new(), root_file.to_path_buf())]);
        while let Some((segments, file)) = queue.pop_front() {
            let text = std::fs::read_to_string(workspace.join(&file)).map_err(|source| {
                TidyError::Read {
                    path: file.clone(),
                    source,
                }
            })?;
            let found = facts(&text);
            let dir = folder_of(&file);
            for child in &found.declared {
                let flat = dir.join(format!("{child}.rs"));
                let nested = dir.join(child).join("mod.rs");
                let child_file = if workspace.join(&flat).is_file() {
                    flat
                } else if workspace.join(&nested).is_file() {
                    nested
                } else {
                    return Err(TidyError::MissingModule {
                        file: file.clone(),
                        name: child.clone(),
                    });
                };
                let mut child_segments = segments.clone();
                child_segments.push(child.clone());
                queue.push_back((child_segments, child_file));
            }
            files.insert(key_of(&segments), (file, found));
        }
        let aliases = aliases_of(&files);
        let mut modules = BTreeMap::new();
        for (key, (file, found)) in &files {
            let here: Vec<String> = split(key);
            let mut uses = BTreeSet::new();
            for named in &found.named {
                let mut logical = here.clone();
                logical.extend(named.inline.iter().cloned());
                let local = if named.inline.is_empty() {
                    aliases.get(key)
                } else {
                    None
                };
                let Some(path) = resolve(&logical, &named.path, local, &found.declared) else {
                    continue;
                };
                let target = owner(&chase(path, &aliases), &files);
                let inside =
                    target == *key || key.is_empty() || target.starts_with(&format!("{key}::"));
                if !inside {
                    uses.insert(target);
                }
            }
            modules.insert(
                key.clone(),
                Module {
                    file: file.clone(),
                    uses,
                },
            );
        }
        Ok(Self {
            package: package.to_owned(),
            root: root_file.to_path_buf(),
            modules,
        })
    }

    /// The circles: each strongly connected set of two or more modules, as one path around it
    /// that starts and ends at its first module.
    pub fn circles(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        for set in strongly_connected(&self.modules) {
            if set.len() < 2 {
                continue;
            }
            out.push(one_cycle(&self.modules, &set));
        }
        out
    }

    /// Edges between the crate's top-level modules (its layers), each module's own files
    /// folded into it.
    pub fn layers(&self) -> BTreeMap<String, BTreeSet<String>> {
        let top = |k: &str| k.split("::").next().unwrap_or_default().to_owned();
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (key, module) in &self.modules {
            if key.is_empty() {
                continue;
            }
            let from = top(key);
            let entry = out.entry(from.clone()).or_default();
            for used in &module.uses {
                let to = if used.is_empty() {
                    "crate".to_owned()
                } else {
                    top(used)
                };
                if to != from {
                    entry.insert(to);
                }
            }
        }
        out
    }

    /// The graph as text: one line per module with what it uses, then the layers.
    pub fn render(&self) -> String {
        let mut s = format!(
            "{} ({}): {} modules\n",
            self.package,
            self.root.display(),
            self.modules.len()
        );
        for (key, module) in &self.modules {
            let uses: Vec<&str> = module.uses.iter().map(|u| shown(u)).collect();
            s.push_str(&format!("  {} -> {}\n", shown(key), uses.join(", ")));
        }
        let layers = self.layers();
        if layers.len() > 1 {
            s.push_str("  between top-level modules:\n");
            for (from, to) in layers {
                let to: Vec<&str> = to.iter().map(String::as_str).collect();
                s.push_str(&format!("    {from} -> {}\n", to.join(", ")));
            }
        }
        s
    }
}

/// The folder a file's child modules live in.
fn folder_of(file: &Path) -> PathBuf {
    let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    match file.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs" | "lib.rs" | "main.rs") => dir,
        _ => dir.join(file.file_stem().unwrap_or_default()),
    }
}

fn split(key: &str) -> Vec<String> {
    if key.is_empty() {
        Vec::new()
    } else {
        key.split("::").map(str::to_owned).collect()
    }
}

type Aliases = HashMap<String, HashMap<String, Vec<String>>>;

/// The names each module's top-level `use`s bind, as paths inside the crate.
fn aliases_of(files: &BTreeMap<String, (PathBuf, FileFacts)>) -> Aliases {
    let mut out: Aliases = HashMap::new();
    for (key, (_, found)) in files {
        let here = split(key);
        let mut local: HashMap<String, Vec<String>> = HashMap::new();
        // Twice, so a `use` that goes through an alias bound later in the file is seen too.
        for _ in 0..2 {
            for named in found.named.iter().filter(|n| n.inline.is_empty()) {
                let Some(alias) = &named.alias else { continue };
                if let Some(path) = resolve(&here, &named.path, Some(&local), &found.declared) {
                    local.insert(alias.clone(), path);
                }
            }
        }
        out.insert(key.clone(), local);
    }
    out
}

/// A path as written in module `logical`, as a path from the crate root; `None` when it is
/// outside the crate.
fn resolve(
    logical: &[String],
    path: &[String],
    aliases: Option<&HashMap<String, Vec<String>>>,
    children: &[String],
) -> Option<Vec<String>> {
    let (head, rest) = path.split_first()?;
    let mut out = match head.as_str() {
        "crate" => Vec::new(),
        "self" => logical.to_vec(),
        "super" => {
            let mut base = logical.to_vec();
            base.pop();
            let mut rest = rest;
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
            base.extend(rest.iter().cloned());
            return Some(base);
        }
        _ => {
            if let Some(target) = aliases.and_then(|a| a.get(head)) {
                let mut base = target.clone();
                base.extend(rest.iter().cloned());
                return Some(base);
            }
            if children.contains(head) {
                let mut base = logical.to_vec();
                base.extend(path.iter().cloned());
                return Some(base);
            }
            return None;
        }
    };
    out.extend(rest.iter().cloned());
    Some(out)
}

/// Follows re-exports: where a prefix of `path` is a module that binds the next segment with a
/// `use`, the path continues from what that `use` names.
fn chase(mut path: Vec<String>, aliases: &Aliases) -> Vec<String> {
    for _ in 0..8 {
        let mut moved = false;
        for cut in (0..path.len()).rev() {
            let key = key_of(&path[..cut]);
            if let Some(target) = aliases.get(&key).and_then(|a| a.get(&path[cut])) {
                if target.as_slice() != &path[..=cut] {
                    let mut next = target.clone();
                    next.extend(path[cut + 1..].iter().cloned());
                    path = next;
                    moved = true;
                }
                break;
            }
        }
        if !moved {
            break;
        }
    }
    path
}

/// The file module a path ends in: its longest prefix that is one.
fn owner(path: &[String], files: &BTreeMap<String, (PathBuf, FileFacts)>) -> String {
    (0..=path.len())
        .rev()
        .map(|n| key_of(&path[..n]))
        .find(|k| files.contains_key(k))
        .unwrap_or_default()
}

/// Tarjan's strongly connected components, each as its members.
fn strongly_connected(modules: &BTreeMap<String, Module>) -> Vec<Vec<String>> {
    struct State<'a> {
        modules: &'a BTreeMap<String, Module>,
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        let modules = s.modules;
        for w in modules.get(v).map(|m| &m.uses).into_iter().flatten() {
            let w = w.as_str();
            if !modules.contains_key(w) {
                continue;
            }
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut set = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                set.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            set.sort();
            s.out.push(set);
        }
    }
    let mut s = State {
        modules,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for key in modules.keys() {
        if !s.index.contains_key(key.as_str()) {
            visit(&mut s, key);
        }
    }
    s.out
}

/// A shortest way around a strongly connected set, from its first member back to it.
fn one_cycle(modules: &BTreeMap<String, Module>, set: &[String]) -> Vec<String> {
    let start = &set[0];
    let mut came_from: HashMap<&str, &str> = HashMap::new();
    let mut queue = VecDeque::from([start.as_str()]);
    while let Some(v) = queue.pop_front() {
        for w in &modules[v].uses {
            if !set.contains(w) {
                continue;
            }
            if w == start {
                let mut middle = Vec::new();
                let mut at = v;
                while at != start.as_str() {
                    middle.push(shown(at).to_owned());
                    at = came_from[at];
                }
                middle.reverse();
                let mut path = vec![shown(start).to_owned()];
                path.extend(middle);
                path.push(shown(start).to_owned());
                return path;
            }
            if !came_from.contains_key(w.as_str()) {
                came_from.insert(w.as_str(), v);
                queue.push_back(w.as_str());
            }
        }
    }
    set.iter().map(|m| shown(m).to_owned()).collect()
}
