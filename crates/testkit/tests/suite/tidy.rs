//! The house rules over the repository itself, and the checks' own behaviour on small trees.

use std::path::Path;

use testkit::tidy::{self, ModuleGraph};

#[test]
fn no_crate_has_a_module_circle() {
    let root = tidy::workspace_root().expect("workspace root");
    let graphs = tidy::module_graphs(&root).expect("module graphs");
    assert!(
        graphs
            .iter()
            .any(|g| g.package == "ahpd-sdk" && g.modules.len() > 40)
    );
    let circles: Vec<String> = graphs
        .iter()
        .flat_map(|g| {
            g.circles()
                .into_iter()
                .map(move |c| format!("{}: {}", g.package, c.join(" -> ")))
        })
        .collect();
    assert!(
        circles.is_empty(),
        "module circles (see .ci/modgraph):\n{}",
        circles.join("\n")
    );
}

#[test]
fn every_tracked_file_keeps_the_house_rules() {
    let root = tidy::workspace_root().expect("workspace root");
    let report = tidy::check_tree(&root).expect("the tree is readable");
    for warning in &report.warnings {
        eprintln!("warning: {warning}");
    }
    let errors: Vec<String> = report.errors.iter().map(ToString::to_string).collect();
    assert!(
        errors.is_empty(),
        "house rules broken:\n{}",
        errors.join("\n")
    );
}

fn write(root: &Path, file: &str, text: &str) {
    let path = root.join(file);
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

fn graph_of(files: &[(&str, &str)]) -> ModuleGraph {
    let dir = tempfile::tempdir().expect("tempdir");
    for (file, text) in files {
        write(dir.path(), &format!("crates/x/src/{file}"), text);
    }
    ModuleGraph::read(dir.path(), "x", Path::new("crates/x/src/lib.rs")).expect("graph")
}

#[test]
fn two_files_that_use_each_other_are_a_circle() {
    let graph = graph_of(&[
        ("lib.rs", "mod a;\nmod b;\npub use a::A;\n"),
        ("a.rs", "use crate::b::B;\npub struct A(B);\n"),
        (
            "b.rs",
            "pub struct B;\nfn f() { let _ = crate::a::A(B); }\n",
        ),
    ]);
    assert_eq!(graph.circles(), [vec!["a", "b", "a"]]);
    assert!(graph.render().contains("  a -> b\n"), "{}", graph.render());
}

#[test]
fn a_circle_through_a_re_export_and_an_alias_is_found() {
    let graph = graph_of(&[
        ("lib.rs", "mod layer;\nmod c;\n"),
        (
            "layer/mod.rs",
            "pub(crate) mod inner;\npub(crate) use inner::Thing;\n",
        ),
        (
            "layer/inner.rs",
            "use crate::c;\npub struct Thing;\nfn f() { c::g(); }\n",
        ),
        (
            "c.rs",
            "pub fn g() {}\nfn h() -> crate::layer::Thing { crate::layer::Thing }\n",
        ),
    ]);
    assert_eq!(graph.circles(), [vec!["c", "layer::inner", "c"]]);
}

#[test]
fn a_folder_and_its_own_files_are_no_circle() {
    let graph = graph_of(&[
        (
            "lib.rs",
            "mod layer;\n#[cfg(test)]\nmod tests { use super::*; }\n",
        ),
        (
            "layer/mod.rs",
            "mod part;\npub use part::P;\npub struct Shared;\nfn f() { part::g(); }\n",
        ),
        (
            "layer/part.rs",
            "use super::Shared;\npub struct P(Shared);\npub fn g() {}\n",
        ),
    ]);
    assert!(graph.circles().is_empty(), "{}", graph.render());
    assert_eq!(
        graph.modules["layer::part"].uses.iter().collect::<Vec<_>>(),
        ["layer"]
    );
}
