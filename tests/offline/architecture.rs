//! What the compiler cannot see of the structure ARCHITECTURE.md describes. The layers are
//! crates (`tidemark-core`, `tidemark-state`, `tidemark-kafka`, and the runtime `tidemark`), so
//! the compiler keeps them; here the manifests are held to the layers, and the source is
//! checked for what lies within a crate: the runtime's modules and each folder's files import
//! each other without circles, `simulate` and `run` share one record step, the formats and the
//! broker names each have one home.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level module → the top-level modules it refers to through `crate::` paths.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The first identifier of every `crate::` path in `code`, with `crate::{a, b::c}` groups
/// (nested braces included) expanded.
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        // `crate::` inside a longer identifier (e.g. `my_crate::`) is someone else's crate.
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            // Split the group's top level on commas.
            let (mut depth, mut start) = (0usize, 0usize);
            let mut items = Vec::new();
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        items.push(&group[start..j]);
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(&group[start..j]);
                        start = j + 1;
                    }
                    _ => {}
                }
            }
            out.extend(items.into_iter().filter_map(ident));
        } else if let Some(id) = ident(rest) {
            out.insert(id);
        }
    }
    out
}

fn ident(s: &str) -> Option<String> {
    let id: String = s
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!id.is_empty() && id != "self").then_some(id)
}

/// Source without comment lines (doc links are not imports).
fn code_of(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module graph of `src/`, by top-level module.
fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut g = Graph::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let refs = crate_refs(&code_of(&f));
        let entry = g.entry(module.clone()).or_default();
        entry.extend(refs.into_iter().filter(|r| *r != module));
    }
    g
}

/// A circle in `g`, as the list of modules along it, if there is one.
fn find_cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        g: &Graph,
        m: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut cycle = path[i..].to_vec();
            cycle.push(m.to_string());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for next in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(g, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|m| visit(g, m, &mut Vec::new(), &mut done))
}

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The inner crates, by the module name the root crate re-exports them under, and their
/// source folders.
const INNER: [(&str, &str); 6] = [
    ("windowing", "crates/tidemark-core/src/windowing"),
    ("expr", "crates/tidemark-core/src/expr"),
    ("pipeline.rs", "crates/tidemark-core/src/pipeline.rs"),
    ("kafka", "crates/tidemark-kafka/src"),
    ("state", "crates/tidemark-state/src"),
    ("sql", "crates/tidemark-sql/src"),
];

/// Where the file or folder `rel` lives, named as a path below the root crate's `src/`
/// (`windowing/entry.rs`, `kafka/quirks`), whichever crate holds it.
fn locate(rel: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for (name, dir) in INNER {
        if rel == name {
            return root.join(dir);
        }
        if let Some(rest) = rel.strip_prefix(&format!("{name}/")) {
            return root.join(dir).join(rest);
        }
    }
    src().join(rel)
}

/// Every `.rs` file of the workspace's crates, with its name as `locate` takes it.
fn all_sources() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    out.extend(
        files
            .drain(..)
            .map(|f| (f.strip_prefix(src()).unwrap().display().to_string(), f)),
    );
    for (name, _) in INNER {
        let dir = locate(name);
        if dir.is_file() {
            out.push((name.to_string(), dir));
            continue;
        }
        rust_files(&dir, &mut files);
        out.extend(files.drain(..).map(|f| {
            let rel = f.strip_prefix(&dir).unwrap().display().to_string();
            (format!("{name}/{rel}"), f)
        }));
    }
    out
}

#[test]
fn the_reference_parser_sees_plain_grouped_and_nested_paths() {
    let code = "use crate::config::X;\nuse crate::{avro, sink::{json, kafka::Y}, self};\n\
                let t = my_crate::nope(); let z = crate::input::Event { };";
    let refs: Vec<String> = crate_refs(code).into_iter().collect();
    assert_eq!(refs, ["avro", "config", "input", "sink"]);
}

#[test]
fn the_cycle_finder_finds_a_planted_circle_and_accepts_a_dag() {
    let mut g = Graph::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert_eq!(find_cycle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(find_cycle(&g).unwrap(), ["a", "b", "c", "a"]);
}

/// The names of the `[dependencies]` of the crate whose manifest is `manifest` (relative to
/// the workspace root).
fn dependencies_of(manifest: &str) -> BTreeSet<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(manifest);
    let text = std::fs::read_to_string(&path).unwrap();
    let doc: toml::Table = toml::from_str(&text).unwrap();
    doc.get("dependencies")
        .and_then(|d| d.as_table())
        .map(|d| d.keys().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn the_crates_depend_on_each_other_along_the_layers() {
    // The compiler keeps the layers: a crate sees only what its manifest names. What each inner
    // crate may name is fixed here, so that a Kafka client, RocksDB or an async runtime cannot
    // slip into the core by an edit of its manifest.
    let layers: [(&str, &[&str]); 4] = [
        (
            "crates/tidemark-core/Cargo.toml",
            &[
                "compact_str",
                "rustc-hash",
                "serde",
                "serde_json",
                "sha2",
                "siphasher",
                "smallvec",
                "sqlparser",
                "thiserror",
            ],
        ),
        (
            "crates/tidemark-state/Cargo.toml",
            &["rocksdb", "thiserror", "tidemark-core"],
        ),
        // Text in, a pipeline document out: not even the core.
        (
            "crates/tidemark-sql/Cargo.toml",
            &["sqlparser", "thiserror", "toml"],
        ),
        (
            "crates/tidemark-kafka/Cargo.toml",
            &[
                "anyhow",
                "bytes",
                "kafka-protocol",
                // TLS for the raw-log reader: the OpenSSL librdkafka links.
                "openssl",
                "rdkafka",
                "thiserror",
                "tokio",
                "tracing",
            ],
        ),
    ];
    for (manifest, allowed) in layers {
        let deps = dependencies_of(manifest);
        assert!(!deps.is_empty(), "{manifest}: no dependencies read");
        let extra: Vec<&String> = deps
            .iter()
            .filter(|d| !allowed.contains(&d.as_str()))
            .collect();
        assert!(extra.is_empty(), "{manifest} depends on {extra:?}");
    }
    // The root crate is the runtime: it depends on all four.
    let root = dependencies_of("Cargo.toml");
    for inner in [
        "tidemark-core",
        "tidemark-state",
        "tidemark-kafka",
        "tidemark-sql",
    ] {
        assert!(root.contains(inner), "the runtime does not use {inner}");
    }
}

#[test]
fn top_level_modules_import_each_other_without_circles() {
    let g = graph(&src());
    assert!(g.len() > 10, "the walk found the modules: {g:?}");
    assert_eq!(find_cycle(&g), None, "module graph: {g:?}");
}

#[test]
fn simulate_and_run_share_one_record_step() {
    let g = graph(&src());
    for module in ["simulate", "coordinator"] {
        assert!(
            g[module].contains("pipeline"),
            "{module} does not use pipeline"
        );
    }
    let simulate = code_of(&src().join("simulate.rs"));
    let run = code_of(&src().join("coordinator/process.rs"));
    for (name, code) in [("simulate", simulate), ("run", run)] {
        assert!(
            code.contains(".record("),
            "{name} does not call Step::record"
        );
        // The engine is reached only through the step.
        assert!(
            !code.contains(".process(&"),
            "{name} calls the engine directly"
        );
    }
    // The hop's two stages run the same halves of the step: the source's front, the partition's
    // back, never the engine directly.
    let first = code_of(&src().join("coordinator/first_stage.rs"));
    let second = code_of(&src().join("coordinator/second_stage.rs"));
    assert!(
        first.contains(".check("),
        "the first stage does not use Front::check"
    );
    assert!(
        second.contains("back.process("),
        "the second stage does not use Back::process"
    );
    assert!(
        !first.contains("engine_mut()") && !second.contains("engine_mut()"),
        "the hop reaches into the engine"
    );
    // The coordinator's main file is no longer one file of everything.
    let lines = std::fs::read_to_string(src().join("coordinator/mod.rs"))
        .unwrap()
        .lines()
        .count();
    assert!(lines < 400, "coordinator/mod.rs has {lines} lines");
}

/// Every `.rs` file under `dir` (relative to `src/`), with its code (comment lines left out).
fn files_under(dir: &str) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    let root = locate(dir);
    if root.is_dir() {
        rust_files(&root, &mut files);
    } else {
        files.push(root);
    }
    files
        .into_iter()
        .map(|f| (f.clone(), code_of(&f)))
        .collect()
}

/// The files of all `src/` whose code contains `needle`, relative to `src/`.
fn files_containing(needle: &str) -> Vec<String> {
    let mut out: Vec<String> = all_sources()
        .into_iter()
        .filter(|(_, f)| code_of(f).contains(needle))
        .map(|(rel, _)| rel)
        .collect();
    out.sort();
    out
}

#[test]
fn the_pane_and_dead_letter_formats_have_one_home() {
    // Their headers and the Avro schemas are spelled only in `format/`; everything else (the
    // coordinator, tail, audit, the connectors) goes through it.
    for needle in [
        "\"tidemark.dedup_id\"",
        "\"tidemark.pane_index\"",
        "\"tidemark.window_start\"",
        "\"tidemark.reason\"",
        "\"tidemark.source_offset\"",
        "window_result.avsc",
        "dead_letter.avsc",
    ] {
        let found = files_containing(needle);
        assert!(!found.is_empty(), "{needle} is spelled nowhere");
        let outside: Vec<&String> = found.iter().filter(|f| !f.starts_with("format/")).collect();
        assert!(
            outside.is_empty(),
            "{needle} spelled outside format/: {outside:?}"
        );
    }
    // The hop's records likewise.
    for needle in ["fn murmur2", "KIND_WATERMARK"] {
        assert_eq!(
            files_containing(needle),
            ["format/repartition.rs"],
            "{needle}"
        );
    }
}

#[test]
fn the_saved_window_state_format_is_in_one_windowing_module() {
    // Tags, entry keys and value encodings live in `windowing/entry.rs`; the state layer knows
    // bytes, column families and offsets, not windows.
    for needle in [
        "const TAG_",
        "fn put_win_state",
        "fn get_cursor",
        "fn put_slice",
    ] {
        assert_eq!(files_containing(needle), ["windowing/entry.rs"], "{needle}");
    }
    for (file, code) in files_under("state") {
        for word in [
            "Window", "Session", "Slice", "Cursor", "WinState", "StateKey",
        ] {
            assert!(
                !code.contains(word),
                "{} mentions {word}: the state layer is generic",
                file.display()
            );
        }
    }
}

#[test]
fn the_windowing_walk_goes_down_and_comes_back_once() {
    // engine -> cache -> (entry, rules, timers, keystate): nothing below calls back up.
    let below: [(&str, &[&str]); 6] = [
        ("windowing/cache.rs", &["engine::"]),
        ("windowing/rules.rs", &["engine::", "cache::"]),
        ("windowing/timers.rs", &["engine::", "cache::"]),
        (
            "windowing/entry.rs",
            &["engine::", "cache::", "rules::", "timers::"],
        ),
        (
            "windowing/keystate",
            &["engine::", "cache::", "rules::", "timers::", "entry::"],
        ),
        (
            "windowing/aggregate",
            &[
                "engine::",
                "cache::",
                "rules::",
                "timers::",
                "entry::",
                "keystate::",
            ],
        ),
    ];
    for (dir, forbidden) in below {
        for (file, code) in files_under(dir) {
            for f in forbidden {
                assert!(
                    !code.contains(&format!("super::{f}"))
                        && !code.contains(&format!("windowing::{f}")),
                    "{} calls up into {f}",
                    file.display()
                );
            }
        }
    }
    assert!(
        files_containing("trait TimerRules").is_empty(),
        "no callback trait from the cache back into the engine"
    );
}

#[test]
fn a_sink_is_a_folder_behind_the_seam_registered_in_one_line() {
    // What every sink needs (Kafka, the raw log, batching, offsets, retries, metrics) is in
    // `sink/mod.rs`; a sink's folder knows only its destination and its section of the file.
    let seam = code_of(&src().join("sink/mod.rs"));
    assert!(seam.contains("pub trait Sink"));
    assert!(
        !seam.contains("postgres::Client"),
        "the seam knows PostgreSQL"
    );
    let sinks: Vec<PathBuf> = std::fs::read_dir(src().join("sink"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert!(!sinks.is_empty());
    for dir in sinks {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        let code: String = files.iter().map(|f| code_of(f)).collect();
        assert!(
            code.contains("impl Sink for"),
            "sink/{name} implements no Sink"
        );
        assert!(
            code.contains("impl SinkSection for"),
            "sink/{name} checks no section of the pipeline file"
        );
        for needle in ["rdkafka", "raw_log", "LogReader", "Following", "metrics::"] {
            assert!(!code.contains(needle), "sink/{name} uses {needle}");
        }
        // Registered in the seam's list, and nowhere else by name.
        assert!(
            seam.contains(&format!("section: &{name}::SECTION")),
            "sink/{name} is not in sink::SINKS"
        );
        let elsewhere: Vec<String> = files_containing(&format!("sink::{name}::"))
            .into_iter()
            .filter(|f| !f.starts_with("sink/"))
            .collect();
        assert!(elsewhere.is_empty(), "sink/{name} named in {elsewhere:?}");
    }
}

#[test]
fn the_command_line_has_a_room_per_command() {
    let cli = code_of(&src().join("cli/mod.rs"));
    for cmd in [
        "validate", "simulate", "run", "replay", "sink", "produce", "probe", "audit", "tail",
    ] {
        assert!(
            src().join(format!("cli/{cmd}.rs")).exists(),
            "cli/{cmd}.rs is missing"
        );
        assert!(
            cli.contains(&format!("pub mod {cmd};")),
            "cli/mod.rs lacks {cmd}"
        );
    }
    let lines = cli.lines().count();
    assert!(
        lines < 200,
        "cli/mod.rs has {lines} lines: a match of everything again?"
    );
}

#[test]
fn only_the_quirks_module_names_a_broker() {
    // Workarounds for one broker's behaviour refer to their entry in `kafka::quirks`, which names
    // the behaviour, the brokers and the test that shows it; nothing else in `src/` names a
    // broker (comments included: a comment that blames a broker belongs in the catalogue).
    let all = all_sources();
    assert!(all.len() > 100, "the walk found the sources: {}", all.len());
    let quirks = locate("kafka/quirks");
    for (_, file) in all.iter().filter(|(_, f)| !f.starts_with(&quirks)) {
        let text = std::fs::read_to_string(file).unwrap().to_lowercase();
        for name in ["tansu", "noida", "redpanda", "test broker"] {
            assert!(
                !text.contains(name),
                "{} names {name:?}: say what the broker does and cite kafka::quirks",
                file.display()
            );
        }
    }
}

#[test]
fn every_quirk_is_shown_by_a_test_that_exists() {
    // `shown_by` entries are `binary/module::test` for tests/ and `module::path::tests::test`
    // for unit tests: the function must exist where the entry says.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for quirk in tidemark::kafka::quirks::ALL {
        for shown in quirk.shown_by {
            let (binary, path) = shown.split_once('/').unwrap_or(("", shown));
            let parts: Vec<&str> = path.split("::").collect();
            let name = parts.last().unwrap();
            let file = if !binary.is_empty() {
                assert_eq!(
                    parts.len(),
                    2,
                    "{}: {shown}: not binary/module::test",
                    quirk.name
                );
                root.join("tests")
                    .join(binary)
                    .join(format!("{}.rs", parts[0]))
            } else {
                let module: Vec<&str> = parts[..parts.len() - 1]
                    .iter()
                    .copied()
                    .filter(|p| *p != "tests")
                    .collect();
                let flat = locate(&format!("{}.rs", module.join("/")));
                if flat.exists() {
                    flat
                } else {
                    let folder = locate(&module.join("/"));
                    if folder.join("lib.rs").exists() {
                        folder.join("lib.rs")
                    } else {
                        folder.join("mod.rs")
                    }
                }
            };
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|_| panic!("{}: {shown}: no file {}", quirk.name, file.display()));
            assert!(
                text.contains(&format!("fn {name}(")),
                "{}: {shown}: no test {name} in {}",
                quirk.name,
                file.display()
            );
        }
    }
}

/// The files of one folder (`mod.rs` left out: its items are the folder's own) → the sibling
/// files and folders each refers to through `super::`.
fn folder_graph(dir: &Path) -> Graph {
    let siblings: BTreeSet<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let name = p.file_stem()?.to_string_lossy().to_string();
            (p.is_dir() || p.extension().is_some_and(|x| x == "rs")).then_some(name)
        })
        .filter(|n| n != "mod" && n != "tests")
        .collect();
    let mut g = Graph::new();
    for name in &siblings {
        let file = dir.join(format!("{name}.rs"));
        let code = if file.is_file() {
            code_of(&file)
        } else {
            let mut files = Vec::new();
            rust_files(&dir.join(name), &mut files);
            files
                .iter()
                .map(|f| code_of(f))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let mut refs = BTreeSet::new();
        let mut rest = code.as_str();
        while let Some(i) = rest.find("super::") {
            rest = &rest[i + "super::".len()..];
            let groups: Vec<String> = match rest.strip_prefix('{') {
                Some(g) => g
                    .split('}')
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .filter_map(ident)
                    .collect(),
                None => ident(rest).into_iter().collect(),
            };
            refs.extend(
                groups
                    .into_iter()
                    .filter(|r| siblings.contains(r) && r != name),
            );
        }
        g.insert(name.clone(), refs);
    }
    g
}

#[test]
fn files_of_a_folder_import_each_other_without_circles() {
    let skip: [&str; 0] = [];
    let mut folders = Vec::new();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut stack = vec![
        src(),
        root.join("crates/tidemark-core/src"),
        root.join("crates/tidemark-kafka/src"),
        root.join("crates/tidemark-state/src"),
    ];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p.clone());
                folders.push(p);
            }
        }
    }
    assert!(folders.len() > 5, "{folders:?}");
    let mut planted = Graph::new();
    planted.insert("rules".into(), ["timers".to_string()].into());
    planted.insert("timers".into(), ["rules".to_string()].into());
    assert!(
        find_cycle(&planted).is_some(),
        "the finder finds a planted circle"
    );
    for f in folders {
        let rel = f.strip_prefix(&root).unwrap().to_string_lossy().to_string();
        if skip.iter().any(|s| rel == *s) {
            continue;
        }
        let g = folder_graph(&f);
        assert_eq!(find_cycle(&g), None, "{rel}: {g:?}");
    }
}

/// The type named by an inherent `impl` line (`impl Name {`, `impl<T> Name<T> {`), if the line
/// is one; trait impls (`impl Trait for Name`) are not.
fn inherent_impl(line: &str) -> Option<String> {
    let rest = line.trim_start().strip_prefix("impl")?;
    if !line.trim_end().ends_with('{') || line.contains(" for ") {
        return None;
    }
    let rest = match rest.strip_prefix('<') {
        Some(r) => &r[r.find('>')? + 1..],
        None => rest,
    };
    let name = ident(rest)?;
    name.starts_with(|c: char| c.is_ascii_uppercase())
        .then_some(name)
}

/// Whether `code` declares a type `name`.
fn declares(code: &str, name: &str) -> bool {
    ["struct", "enum", "union", "type"].iter().any(|kw| {
        code.lines().any(|l| {
            l.split_whitespace()
                .collect::<Vec<_>>()
                .windows(2)
                .any(|w| w[0] == *kw && ident(w[1]).as_deref() == Some(name))
        })
    })
}

#[test]
fn a_types_inherent_impl_lives_in_one_file() {
    assert_eq!(inherent_impl("impl Core {").as_deref(), Some("Core"));
    assert_eq!(
        inherent_impl("impl<'a> Emit<'a> {").as_deref(),
        Some("Emit")
    );
    assert_eq!(inherent_impl("impl fmt::Display for Datum<'_> {"), None);
    let files: Vec<PathBuf> = all_sources().into_iter().map(|(_, f)| f).collect();
    let mut impls: BTreeMap<String, BTreeSet<PathBuf>> = BTreeMap::new();
    for f in &files {
        for line in code_of(f).lines() {
            if let Some(name) = inherent_impl(line) {
                impls.entry(name).or_default().insert(f.clone());
            }
        }
    }
    let mut spread = Vec::new();
    for (name, homes) in &impls {
        if homes.len() < 2 {
            continue;
        }
        // Types of one name in several modules are several types, each at home where declared.
        for f in homes {
            let rel = f.display().to_string();
            if !declares(&code_of(f), name) {
                spread.push(format!("{name} in {rel}"));
            }
        }
    }
    assert!(spread.is_empty(), "impls away from their type: {spread:?}");
}

#[test]
fn the_coordinators_parts_do_not_know_the_member() {
    // The member (`Core`) lends its parts to the rooms that do the work; the rooms get what they
    // need as arguments and never see the member. Only the member's own file, the loop, and
    // the two that drive the member from outside (the consumer context and the membership)
    // name it.
    let drivers = ["member.rs", "mod.rs", "rebalance.rs", "membership.rs"];
    let mut knowing = Vec::new();
    for (f, code) in files_under("coordinator") {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        if code.contains("Core") && !drivers.contains(&name.as_str()) {
            knowing.push(name);
        }
    }
    assert!(
        knowing.is_empty(),
        "parts that name the member: {knowing:?}"
    );
}
