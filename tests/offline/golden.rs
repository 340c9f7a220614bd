//! Golden tests for `tidemark simulate`: every directory under `tests/golden/` holds a pipeline, an
//! input file and the panes and dead letters expected from it, worked out by hand from the rules in
//! ARCHITECTURE.md. The `dedup_id` of each pane is checked against the definition separately, so the
//! expected files leave it out.

use serde_json::Value;
use std::path::{Path, PathBuf};
use tidemark::config::parse_raw;
use tidemark::state::store::StateStore;
use tidemark::windowing::assigner::Window;
use tidemark::windowing::engine::dedup_id;

fn run(dir: &Path) -> (String, String) {
    let text = std::fs::read_to_string(dir.join("pipeline.toml")).unwrap();
    let (spec, _) = parse_raw(&text, Vec::new()).unwrap().validate().unwrap();
    let input = std::fs::read(dir.join("input.jsonl")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let store = StateStore::open(tmp.path()).unwrap();
    let (mut panes, mut dead) = (Vec::new(), Vec::new());
    tidemark::simulate::run(&spec, &store, &input[..], &mut panes, &mut dead).unwrap();
    (
        String::from_utf8(panes).unwrap(),
        String::from_utf8(dead).unwrap(),
    )
}

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn scenarios() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("pipeline.toml").exists())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn simulate_matches_every_golden_scenario() {
    let dirs = scenarios();
    assert!(dirs.len() >= 15, "golden scenarios missing: {dirs:?}");
    let mut failures = Vec::new();
    for dir in &dirs {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let (panes, dead) = run(dir);
        // Deterministic: a second run gives the same bytes.
        assert_eq!(
            run(dir),
            (panes.clone(), dead.clone()),
            "{name}: output differs between runs"
        );

        let mut got = lines(&panes);
        for p in &mut got {
            let o = p.as_object_mut().unwrap();
            let id = o.remove("dedup_id").unwrap();
            let w = Window::new(
                o["window_start"].as_i64().unwrap(),
                o["window_end"].as_i64().unwrap(),
            );
            assert_eq!(
                id.as_str().unwrap(),
                dedup_id("golden", o["key"].as_str().unwrap(), w).as_str(),
                "{name}: dedup id"
            );
        }
        let want = lines(&std::fs::read_to_string(dir.join("expected_panes.jsonl")).unwrap());
        if got != want {
            failures.push(format!(
                "{name}: panes differ\n  got:\n    {}\n  want:\n    {}",
                got.iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join("\n    "),
                want.iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join("\n    ")
            ));
        }

        // Dead letters: the fields named in the expected file must match; the original line must
        // be carried untouched.
        let got_dead = lines(&dead);
        let want_dead = lines(&std::fs::read_to_string(dir.join("expected_dead.jsonl")).unwrap());
        let input: Vec<String> = std::fs::read_to_string(dir.join("input.jsonl"))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        let projected: Vec<Value> = got_dead
            .iter()
            .zip(want_dead.iter().chain(std::iter::repeat(&Value::Null)))
            .map(|(g, w)| {
                let line = g["line"].as_u64().unwrap() as usize;
                assert_eq!(
                    g["original"].as_str().unwrap(),
                    input[line - 1],
                    "{name}: original line"
                );
                match w.as_object() {
                    Some(w) => Value::Object(w.keys().map(|k| (k.clone(), g[k].clone())).collect()),
                    None => g.clone(),
                }
            })
            .collect();
        if projected != want_dead {
            failures.push(format!(
                "{name}: dead letters differ\n  got:  {projected:?}\n  want: {want_dead:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn dedup_id_is_pinned() {
    // Values computed independently (Python hashlib) from the documented definition.
    assert_eq!(
        dedup_id("golden", "a", Window::new(0, 10)).as_str(),
        "2bbc822fa6e0374039229ea0d01e9148"
    );
    assert_eq!(
        dedup_id("clicks", "user-7", Window::new(-60_000, 0)).as_str(),
        "ef35990dcf214c0cb916e5a5827a0df5"
    );
}
