//! Tools cases 9.8 (docs/acceptance.md): resolve_within and display_path.

use std::path::{Path, PathBuf};

use cofold_tools::paths::{display_path, resolve_within};

use super::files_fixture::Ws;

#[test]
fn lexical_resolution_and_inside() {
    let ws = Path::new("/ws");
    let r = resolve_within(ws, Path::new("src/a.ts"));
    assert_eq!(
        (r.absolute, r.inside),
        (PathBuf::from("/ws/src/a.ts"), true)
    );
    let r = resolve_within(ws, Path::new("."));
    assert_eq!((r.absolute, r.inside), (PathBuf::from("/ws"), true));
    let r = resolve_within(ws, Path::new("../other"));
    assert_eq!((r.absolute, r.inside), (PathBuf::from("/other"), false));
    let r = resolve_within(ws, Path::new(".."));
    assert_eq!((r.absolute, r.inside), (PathBuf::from("/"), false));
    assert!(resolve_within(ws, Path::new("/ws/..sibling")).inside);
    assert!(!resolve_within(ws, Path::new("/ws2/x")).inside);
    assert!(!resolve_within(ws, Path::new("/")).inside);
}

#[test]
fn display_is_relative_inside_and_absolute_outside() {
    let ws = Path::new("/ws");
    assert_eq!(display_path(ws, Path::new("/ws/src/a.ts")), "src/a.ts");
    assert_eq!(display_path(ws, Path::new("/other")), "/other");
    assert_eq!(display_path(ws, Path::new("/ws")), ".");
    assert_eq!(display_path(ws, Path::new("/ws/./src/../x")), "x");
}

#[cfg(unix)]
mod links {
    use std::fs;
    use std::os::unix::fs::symlink;

    use super::*;

    /// A temporary folder holding `ws`, `elsewhere`, `away/sub` and `base`.
    fn layout() -> (Ws, PathBuf) {
        let tmp = Ws::empty();
        for dir in ["ws", "elsewhere", "away/sub", "base"] {
            fs::create_dir_all(tmp.path(dir)).expect("folder");
        }
        let ws = tmp.path("ws");
        (tmp, ws)
    }

    #[test]
    fn a_link_out_of_the_workspace_is_outside() {
        let (tmp, ws) = layout();
        symlink(tmp.path("elsewhere"), ws.join("link")).expect("link");
        let r = resolve_within(&ws, Path::new("link/new.txt"));
        assert_eq!(r.absolute, ws.join("link/new.txt"));
        assert_eq!(r.real, tmp.path("elsewhere/new.txt"));
        assert!(!r.inside);
        assert!(!resolve_within(&ws, Path::new("link")).inside);
        assert_eq!(display_path(&ws, &r.absolute), "link/new.txt");
    }

    #[test]
    fn a_missing_tail_is_judged_by_its_nearest_ancestor() {
        let (_tmp, ws) = layout();
        let r = resolve_within(&ws, Path::new("sub/new.txt"));
        assert_eq!(r.real, ws.join("sub/new.txt"));
        assert!(r.inside);
    }

    #[test]
    fn a_dangling_link_is_judged_by_its_target() {
        let (tmp, ws) = layout();
        symlink(tmp.path("elsewhere/later.txt"), ws.join("dangling")).expect("link");
        let r = resolve_within(&ws, Path::new("dangling"));
        assert_eq!(r.real, tmp.path("elsewhere/later.txt"));
        assert!(!r.inside);
    }

    #[test]
    fn a_workspace_reached_through_an_alias_still_matches() {
        let (tmp, ws) = layout();
        let alias = tmp.path("base/alias");
        symlink(&ws, &alias).expect("link");
        assert!(resolve_within(&alias, Path::new("sub/new.txt")).inside);
        assert!(resolve_within(&ws, &alias.join("x")).inside);
    }

    #[test]
    fn link_targets_are_walked_name_by_name() {
        let (tmp, ws) = layout();
        symlink("../away/sub", ws.join("sublink")).expect("link");
        symlink("sublink/../esc2.txt", ws.join("trick")).expect("link");
        symlink("sublink/in.txt", ws.join("through")).expect("link");
        symlink("../ws/kept.txt", ws.join("back")).expect("link");
        let trick = resolve_within(&ws, Path::new("trick"));
        assert_eq!(trick.real, tmp.path("away/esc2.txt"));
        assert!(!trick.inside);
        assert!(!resolve_within(&ws, Path::new("through")).inside);
        let back = resolve_within(&ws, Path::new("back"));
        assert_eq!(back.real, ws.join("kept.txt"));
        assert!(back.inside);
    }

    #[test]
    fn chains_and_loops() {
        let (_tmp, ws) = layout();
        symlink("second", ws.join("first")).expect("link");
        symlink("../away/x.txt", ws.join("second")).expect("link");
        assert!(!resolve_within(&ws, Path::new("first")).inside);
        symlink("loop", ws.join("loop")).expect("link");
        let r = resolve_within(&ws, Path::new("loop"));
        assert_eq!(r.real, ws.join("loop"));
        assert!(r.inside);
    }
}
