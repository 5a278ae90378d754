//! The generic resolver (runtime cases 256–263, docs/acceptance.md).

use cofold_config::{
    ConfigError, EnvFile, LayerKind, ResolveOptions, environment_name_of, resolve_config,
};
use serde_json::json;

use super::support::World;

fn options(w: &World, name: &str, cwd: &str) -> ResolveOptions {
    ResolveOptions {
        project: Some(".tool.json".into()),
        env: Some(w.env.clone()),
        home: Some(w.home()),
        ..ResolveOptions::new(name, w.path(cwd))
    }
}

#[test]
fn item_256_leaf_by_leaf_merge() {
    let w = World::new();
    w.write(
        "home/.config/tool/config.json",
        &json!({ "theme": { "mode": "dark", "color": "blue" } }),
    );
    w.write(
        "work/project/.tool.json",
        &json!({ "theme": { "mode": "light" } }),
    );
    let r = resolve_config(options(&w, "tool", "work/project")).unwrap();
    assert_eq!(
        r.values["theme"],
        json!({ "mode": "light", "color": "blue" })
    );
}

#[test]
fn item_257_project_file_found_above_the_working_folder() {
    let w = World::new();
    w.write("home/.config/tool/config.json", &json!({ "a": "user" }));
    let project = w.write("work/project/.tool.json", &json!({ "a": "project" }));
    let r = resolve_config(options(&w, "tool", "work/project/sub")).unwrap();
    assert_eq!(r.values["a"], "project");
    assert_eq!(
        r.source_of("a"),
        Some(project.display().to_string().as_str())
    );
    let elsewhere = resolve_config(options(&w, "tool", "work")).unwrap();
    assert_eq!(elsewhere.values["a"], "user");
    assert_eq!(
        elsewhere.layers.iter().map(|l| l.kind).collect::<Vec<_>>(),
        [LayerKind::Base, LayerKind::User]
    );
}

#[test]
fn item_258_base_is_under_everything_and_first() {
    let w = World::new();
    w.write("home/.config/tool/config.json", &json!({ "b": 2 }));
    let r = resolve_config(ResolveOptions {
        base: json!({ "a": 1, "b": 1 }),
        ..options(&w, "tool", "work")
    })
    .unwrap();
    assert_eq!(r.values, json!({ "a": 1, "b": 2 }));
    assert_eq!(
        (r.layers[0].kind, r.layers[0].path.as_str()),
        (LayerKind::Base, "(defaults)")
    );
    assert_eq!(r.source_of("a"), Some("(defaults)"));
}

#[test]
fn item_259_environment_file_then_explicit_path() {
    let mut w = World::new();
    w.write(
        "work/project/.tool.json",
        &json!({ "a": "project", "b": "project", "c": "project" }),
    );
    w.write("work/project/env.json", &json!({ "b": "env", "c": "env" }));
    let explicit = w.write("work/project/explicit.json", &json!({ "c": "explicit" }));
    w.set("TOOL_CONFIG", "env.json");
    let r = resolve_config(ResolveOptions {
        path: Some("explicit.json".into()),
        env: Some(w.env.clone()),
        ..options(&w, "tool", "work/project")
    })
    .unwrap();
    assert_eq!(
        r.values,
        json!({ "a": "project", "b": "env", "c": "explicit" })
    );
    assert_eq!(
        r.source_of("c"),
        Some(explicit.display().to_string().as_str())
    );
    let kinds: Vec<_> = r.layers.iter().map(|l| l.kind).collect();
    assert_eq!(
        kinds,
        [
            LayerKind::Base,
            LayerKind::Project,
            LayerKind::Environment,
            LayerKind::Explicit
        ]
    );
    // A variable of the caller's choosing, and none at all.
    w.set("OTHER", "env.json");
    let named = resolve_config(ResolveOptions {
        environment: EnvFile::Named("OTHER".into()),
        env: Some(w.env.clone()),
        ..options(&w, "x", "work/project")
    })
    .unwrap();
    assert_eq!(named.values["b"], "env");
    let off = resolve_config(ResolveOptions {
        environment: EnvFile::Off,
        env: Some(w.env.clone()),
        ..options(&w, "tool", "work/project")
    })
    .unwrap();
    assert_eq!(off.values["b"], "project");
}

#[test]
fn item_260_environment_names() {
    assert_eq!(environment_name_of("depot"), "DEPOT_CONFIG");
    assert_eq!(environment_name_of("my-tool"), "MY_TOOL_CONFIG");
    assert_eq!(environment_name_of("copapo"), "COPAPO_CONFIG");
}

#[test]
fn item_261_source_of_names_the_last_file() {
    let w = World::new();
    let user = w.write(
        "home/.config/tool/config.json",
        &json!({ "theme": { "mode": "dark", "color": "blue" } }),
    );
    let project = w.write(
        "work/project/.tool.json",
        &json!({ "theme": { "mode": "light" } }),
    );
    let r = resolve_config(options(&w, "tool", "work/project")).unwrap();
    let (u, p) = (user.display().to_string(), project.display().to_string());
    assert_eq!(r.source_of("theme.mode"), Some(p.as_str()));
    assert_eq!(r.source_of("theme.color"), Some(u.as_str()));
    assert_eq!(r.source_of("theme"), Some(p.as_str()));
    assert_eq!(r.source_of("theme.size"), None);
    assert_eq!(r.get("theme.size"), None);
    assert_eq!(r.get("theme.color"), Some(&json!("blue")));
}

#[test]
fn item_262_named_files_must_exist_and_be_json_objects() {
    let mut w = World::new();
    let e = resolve_config(ResolveOptions {
        path: Some("missing.json".into()),
        ..options(&w, "tool", "work")
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{} was asked for and is not there",
            w.path("work/missing.json").display()
        )
    );
    w.set("TOOL_CONFIG", "/nowhere/config.json");
    let e = resolve_config(options(&w, "tool", "work")).unwrap_err();
    assert_eq!(
        e,
        ConfigError::Missing {
            path: "/nowhere/config.json".into()
        }
    );
    let w2 = World::new();
    let folder = resolve_config(ResolveOptions {
        path: Some(w2.path("work")),
        ..options(&w2, "tool", "work")
    });
    assert_eq!(
        folder.unwrap_err(),
        ConfigError::Missing {
            path: w2.path("work").display().to_string()
        }
    );

    let w = World::new();
    let bad = w.write_text("work/bad.json", "{ \"a\": ");
    let e = resolve_config(ResolveOptions {
        path: Some(bad.clone()),
        ..options(&w, "tool", "work")
    })
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("{} is not valid JSON: ", bad.display())),
        "{e}"
    );
    let list = w.write("work/list.json", &json!([1, 2]));
    let e = resolve_config(ResolveOptions {
        path: Some(list.clone()),
        ..options(&w, "tool", "work")
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{} is not an object, so it is not a configuration file",
            list.display()
        )
    );
    // An optional file that is not JSON is an error too: it exists, so it was meant.
    w.write_text("home/.config/tool/config.json", "nope");
    assert!(matches!(
        resolve_config(options(&w, "tool", "work")),
        Err(ConfigError::NotJson { .. })
    ));
}

#[test]
fn item_263_xdg_config_home_or_dot_config() {
    let mut w = World::new();
    w.write("home/.config/tool/config.json", &json!({ "from": "home" }));
    w.write("xdg/tool/config.json", &json!({ "from": "xdg" }));
    assert_eq!(
        resolve_config(options(&w, "tool", "work")).unwrap().values["from"],
        "home"
    );
    w.set("XDG_CONFIG_HOME", w.path("xdg").to_str().unwrap());
    assert_eq!(
        resolve_config(options(&w, "tool", "work")).unwrap().values["from"],
        "xdg"
    );
    w.set("XDG_CONFIG_HOME", "");
    assert_eq!(
        resolve_config(options(&w, "tool", "work")).unwrap().values["from"],
        "home"
    );
    let no_user = resolve_config(ResolveOptions {
        user: false,
        ..options(&w, "tool", "work")
    })
    .unwrap();
    assert!(no_user.values.get("from").is_none());
}
