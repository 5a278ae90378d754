//! Tools cases 9.10 (docs/acceptance.md): the memory capability against a real folder.

use std::path::PathBuf;

use cofold_agents::capability::Capability;
use cofold_tools::memory::{MemoryOptions, memory};
use serde_json::json;

use super::tools_driver::{Caps, run_args};

struct Fixture {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    dir: PathBuf,
    caps: Caps,
    capability: cofold_tools::memory::MemoryCapability,
}

async fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().expect("temp dir");
    let base = std::fs::canonicalize(tmp.path()).expect("canonical");
    let dir = base.join("memory").join("ws");
    let capability = memory(MemoryOptions {
        dir: dir.clone(),
        index_lines: 2,
    });
    let caps = Caps::of(&capability, None).await;
    Fixture {
        _tmp: tmp,
        base,
        dir,
        caps,
        capability,
    }
}

impl Fixture {
    async fn instructions(&self) -> String {
        self.capability
            .instructions(&run_args(None))
            .await
            .expect("instructions")
            .expect("some text")
    }
}

#[tokio::test]
async fn an_empty_memory() {
    let f = fixture().await;
    let text = f.instructions().await;
    assert!(text.starts_with("You have a memory"), "{text}");
    assert!(text.ends_with("MEMORY.md is empty."), "{text}");
    assert_eq!(f.caps.names(), ["memory_read", "memory_write"]);
    let read = f.caps.tool("memory_read").effects();
    assert!(read.reads && !read.writes && !read.network && !read.destructive);
    let write = f.caps.tool("memory_write").effects();
    assert!(write.writes && !write.reads && !write.network && !write.destructive);
    assert_eq!(
        f.caps.refused("memory_read", json!({})).await,
        "memory is empty"
    );
    assert_eq!(
        f.caps
            .refused("memory_read", json!({"path": "MEMORY.md"}))
            .await,
        "memory is empty"
    );
    assert_eq!(
        f.caps
            .refused("memory_read", json!({"path": "topics/x.md"}))
            .await,
        "no memory file topics/x.md"
    );
    assert!(f.caps.tool("memory_read").input().get("required").is_none());
}

#[tokio::test]
async fn write_then_read() {
    let f = fixture().await;
    let content = "pnpm check runs everything\n";
    assert_eq!(
        f.caps
            .ok(
                "memory_write",
                json!({"path": "topics/build.md", "content": content})
            )
            .await,
        "wrote topics/build.md (27 bytes)"
    );
    assert!(f.dir.join("topics").is_dir());
    assert_eq!(
        f.caps
            .ok("memory_read", json!({"path": "topics/build.md"}))
            .await,
        content
    );
    // Files are plain: a person's edit is what the next read returns, line endings kept.
    std::fs::write(f.dir.join("topics/build.md"), "edited\r\nby hand").expect("write");
    assert_eq!(
        f.caps
            .ok("memory_read", json!({"path": "topics/build.md"}))
            .await,
        "edited\r\nby hand"
    );
}

#[tokio::test]
async fn the_index_is_in_the_instructions() {
    let f = fixture().await;
    let index = "# Memory\n- [build](topics/build.md) - how to check\n- third line\n";
    f.caps
        .ok(
            "memory_write",
            json!({"path": "MEMORY.md", "content": index}),
        )
        .await;
    let text = f.instructions().await;
    assert!(
        text.contains("# Memory\n- [build](topics/build.md) - how to check\n[1 more lines; memory_read() has them all]"),
        "{text}"
    );
    // The index is the last thing, inside the block of the agent's own notes.
    assert!(text.ends_with("[1 more lines; memory_read() has them all]\n</memory-notes>"));
    assert_eq!(f.caps.ok("memory_read", json!({})).await, index);

    let all = memory(MemoryOptions::new(f.dir.clone()));
    let text = all
        .instructions(&run_args(None))
        .await
        .expect("ok")
        .expect("text");
    assert!(!text.contains("more lines"), "{text}");
    assert!(text.ends_with("- third line\n</memory-notes>"), "{text}");

    std::fs::write(f.dir.join("MEMORY.md"), " \n\n").expect("write");
    assert!(f.instructions().await.ends_with("MEMORY.md is empty."));
}

#[tokio::test]
async fn subjects_and_writes() {
    let f = fixture().await;
    assert_eq!(
        f.caps.subject("memory_read", json!({})),
        Some("MEMORY.md".into())
    );
    assert_eq!(
        f.caps
            .subject("memory_read", json!({"path": "topics/build.md"})),
        Some("topics/build.md".into())
    );
    assert_eq!(
        f.caps
            .subject("memory_write", json!({"path": "notes/a.md", "content": ""})),
        Some("notes/a.md".into())
    );
    assert_eq!(
        f.caps.subject(
            "memory_write",
            json!({"path": "./notes/../a.md", "content": ""})
        ),
        Some("a.md".into())
    );
    let parent = f.base.join("memory").join("x.md");
    assert_eq!(
        f.caps.subject("memory_read", json!({"path": "../x.md"})),
        Some(parent.to_string_lossy().replace('\\', "/"))
    );
    assert_eq!(
        f.caps.writes(
            "memory_write",
            json!({"path": "topics/build.md", "content": ""})
        ),
        Some(f.dir.join("topics").join("build.md"))
    );
    assert!(!f.caps.tool("memory_read").has_writes());
}

#[tokio::test]
async fn paths_that_leave_the_folder_are_refused() {
    let f = fixture().await;
    std::fs::create_dir_all(&f.dir).expect("dir");
    std::fs::write(f.base.join("memory/secret.md"), "secret").expect("write");
    assert_eq!(
        f.caps
            .refused("memory_read", json!({"path": "../secret.md"}))
            .await,
        "../secret.md is outside the memory folder"
    );
    let outside = f.dir.join("..").join("other.md");
    let refusal = f
        .caps
        .refused(
            "memory_write",
            json!({"path": outside.to_string_lossy(), "content": "x"}),
        )
        .await;
    assert!(
        refusal.contains("is outside the memory folder"),
        "{refusal}"
    );
    assert!(!f.base.join("memory/other.md").exists());

    #[cfg(unix)]
    {
        let away = f.base.join("away");
        std::fs::create_dir_all(&away).expect("away");
        std::fs::write(away.join("note.md"), "away").expect("write");
        std::os::unix::fs::symlink(&away, f.dir.join("link")).expect("link");
        assert_eq!(
            f.caps
                .refused("memory_read", json!({"path": "link/note.md"}))
                .await,
            "link/note.md is outside the memory folder"
        );
        assert_eq!(
            f.caps
                .refused(
                    "memory_write",
                    json!({"path": "link/new.md", "content": "x"})
                )
                .await,
            "link/new.md is outside the memory folder"
        );
        assert!(!away.join("new.md").exists());
    }
}

#[tokio::test]
async fn a_folder_named_memory_md_fails_the_instructions() {
    let f = fixture().await;
    std::fs::create_dir_all(f.dir.join("MEMORY.md")).expect("folder");
    assert!(f.capability.instructions(&run_args(None)).await.is_err());
}
