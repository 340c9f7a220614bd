//! The project's documents speak to their readers: the README stays short and opens with the two
//! commands and a pipeline, and no file narrates the project's own history (issue numbers, work
//! sessions, numbered phases of the work). Session windows are a product term and stay.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every text file of the project, without build output, version control and generated
/// regression seeds.
fn project_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let skip = ["target", ".git", "proptest-regressions", "node_modules"];
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if !skip.contains(&name.as_str()) && !name.starts_with('.') || name == ".ci" {
                project_files(&path, out);
            }
        } else if !name.ends_with(".proptest-regressions") && name != "Cargo.lock" {
            out.push(path);
        }
    }
}

/// The words of a line, lower-cased, with the punctuation around them dropped but a leading `#`
/// kept (as in `#27`); addresses (an upstream project's issue tracker) are left out.
fn words(line: &str) -> Vec<String> {
    line.split_whitespace()
        .filter(|t| !t.contains("://"))
        .flat_map(|t| t.split(|c: char| "()[]{},;:.!?\"'`*_/".contains(c)))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn is_number(w: &str) -> bool {
    let digits = w.strip_prefix('#').unwrap_or(w);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// What in one line reads as the project's history rather than the product, if anything.
fn narration(line: &str) -> Option<String> {
    let w = words(line);
    for pair in w.windows(2) {
        let (a, b) = (pair[0].as_str(), pair[1].as_str());
        let found = match a {
            "issue" | "issues" | "ticket" | "task" | "tasks" => is_number(b),
            "phase" | "milestone" | "iteration" | "sprint" => is_number(b),
            "this" | "previous" | "earlier" | "work" | "next" => b == "session" || b == "sessions",
            _ => false,
        };
        if found {
            return Some(format!("{a} {b}"));
        }
    }
    w.iter()
        .find(|x| x.starts_with('#') && is_number(x) && !line.contains(&format!("&{x}")))
        .map(|x| x.to_string())
}

#[test]
fn the_narration_finder_finds_history_and_leaves_the_product_alone() {
    for history in [
        "Fixed in issue 27, as planned.",
        "See #31 for the rest.",
        "Measured in this session on a busy machine.",
        "phase 2 of the rewrite",
        "(tasks 12 and 13)",
    ] {
        assert!(narration(history).is_some(), "{history}");
    }
    for product in [
        "A session closes after its gap; the last session of a user is the longest.",
        "The session timeout bounds a dead member's partitions.",
        "#[test]",
        "Issues found at validate are listed together.",
        "live phase (a): 200000 events",
        "## Results",
        "upstream: https://github.com/confluentinc/librdkafka/issues/4362",
    ] {
        assert_eq!(narration(product), None, "{product}");
    }
}

#[test]
fn no_file_narrates_the_projects_history() {
    let me = Path::new(file!()).file_name().unwrap().to_owned();
    let mut files = Vec::new();
    project_files(&root(), &mut files);
    let mut found = Vec::new();
    let mut read = 0;
    for path in files {
        if path.file_name() == Some(&me) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue; // not text
        };
        read += 1;
        for (n, line) in text.lines().enumerate() {
            if let Some(what) = narration(line) {
                let rel = path.strip_prefix(root()).unwrap().display().to_string();
                found.push(format!("{rel}:{}: {what}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(read > 100, "only {read} files read: is the walk right?");
    assert!(found.is_empty(), "narrated history:\n{}", found.join("\n"));
}

#[test]
fn the_readme_opens_with_the_two_commands_and_a_pipeline_and_stays_short() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 260,
        "README.md has {lines} lines; references belong in docs/"
    );
    let first_screen: String = readme.lines().take(60).collect::<Vec<_>>().join("\n");
    for (what, needle) in [
        ("the demo command", "scripts/demo.sh"),
        ("the test command", "scripts/test.sh"),
        ("a pipeline", "[window]"),
    ] {
        assert!(
            first_screen.contains(needle),
            "the README's first 60 lines do not show {what} ({needle})"
        );
    }
    for link in [
        "docs/pipeline.md",
        "docs/operations.md",
        "docs/reliability.md",
    ] {
        assert!(readme.contains(link), "README.md does not link {link}");
    }
}
