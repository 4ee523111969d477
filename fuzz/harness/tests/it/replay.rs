//! Replays every checked-in fuzz input on stable, in the test command: the seed corpus
//! (`fuzz/corpus/<target>/`) and the reproducers of past findings (`fuzz/regressions/<target>/`) go through
//! the same functions as the fuzz targets, so a fixed crash stays fixed without a nightly toolchain.

use std::path::{Path, PathBuf};

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a readable directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_corpus_and_regression_input_replays_without_a_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut replayed = 0;
    for (name, target) in fuzz_harness::TARGETS {
        let seeds = files(&root.join("corpus").join(name));
        assert!(!seeds.is_empty(), "no seed corpus for the target {name}");
        for file in seeds.iter().chain(&files(&root.join("regressions").join(name))) {
            let data = std::fs::read(file).expect("a readable corpus file");
            if std::panic::catch_unwind(|| target(&data)).is_err() {
                panic!("{name} panics on {}", file.display());
            }
            replayed += 1;
        }
    }
    // A directory for a target that does not exist would never be replayed.
    for dir in ["corpus", "regressions"] {
        for entry in std::fs::read_dir(root.join(dir)).into_iter().flatten() {
            let name = entry.expect("a readable directory entry").file_name();
            let known = fuzz_harness::TARGETS.iter().any(|(t, _)| name == *t);
            assert!(known || name == "README.md", "fuzz/{dir}/{name:?} names no target");
        }
    }
    println!("replayed {replayed} inputs");
}
