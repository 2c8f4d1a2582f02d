//! `weir transform init`, `build` and `test`, as an author runs them with an installed `weir`
//! (the binary alone, outside the checkout, with a fresh `HOME`): a project generated in a
//! fresh temporary folder (outside the repository) builds with the real toolchain of its
//! language and passes its own test; a broken expected output, a failing unit test and a
//! transform error fail `test` with exit status 1 and say why; a project in an unknown language,
//! or no project at all, is a usage error (exit status 2).
//!
//! One template per language keeps the builds few (Python and JavaScript components take 20-30 s
//! each); the Go project, the quickest to build, carries the failure cases.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use weir_tests::weir_binary;

/// The outcome of one `weir` run.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `weir` as a user's installed copy would run: the built binary copied alone into a `bin/`
/// folder of the test's temporary folder (outside the checkout: no `guest-sdk` is reachable from
/// it, and `WEIR_SDK_DIR` is unset), with a fresh `HOME`, so that it must write out the SDK built
/// into it. The toolchains' own caches (cargo, rustup, pip, npm, Go) stay the machine's, as they
/// would on a user's machine, so that the run downloads no more than a warm user's would.
fn weir(args: &[&str], dir: &Path) -> Run {
    let temp = std::path::absolute(std::env::temp_dir()).expect("the temporary dir"); // as tempfile makes it
    let folder = dir.ancestors().find(|a| a.parent() == Some(temp.as_path())).expect("a folder in the temporary dir");
    let binary = folder.join("bin/weir");
    if !binary.exists() {
        std::fs::create_dir_all(folder.join("bin")).unwrap();
        std::fs::create_dir_all(folder.join("home")).unwrap();
        std::fs::copy(weir_binary(), &binary).expect("copy the weir binary");
    }
    let home = std::path::absolute(std::env::var_os("HOME").expect("HOME")).unwrap();
    let keep = |name: &str, default: PathBuf| std::env::var_os(name).map_or(default, PathBuf::from);
    let mut command = Command::new(&binary);
    command
        .args(args)
        .current_dir(dir)
        .env_remove("WEIR_SDK_DIR")
        .env_remove("WEIR_CACHE_DIR")
        .env_remove("WEIR_CACHE")
        .env_remove("XDG_CACHE_HOME")
        .env("HOME", folder.join("home"))
        .env("CARGO_HOME", keep("CARGO_HOME", home.join(".cargo")))
        .env("RUSTUP_HOME", keep("RUSTUP_HOME", home.join(".rustup")))
        .env("PIP_CACHE_DIR", keep("PIP_CACHE_DIR", home.join(".cache/pip")))
        .env("npm_config_cache", keep("npm_config_cache", home.join(".npm")))
        .env("GOMODCACHE", keep("GOMODCACHE", home.join("go/pkg/mod")))
        .env("GOCACHE", keep("GOCACHE", home.join(".cache/go-build")))
        // The generated projects' Rust builds get a cargo target dir inside the test's own
        // temporary folder, so it goes with the folder. Not the repository's: sharing one with
        // the repository's guests, whose dependencies they share in other build graphs, made
        // cargo rebuild the plugins after them (and so examples/flights/run.sh compile after
        // scripts/test.sh, which .ci/run refuses). Not one beside it either: the projects' paths
        // are new each run and cargo keys a target dir by workspace path.
        .env("CARGO_TARGET_DIR", folder.join("cargo-target"));
    // A child that another test thread forks while this one writes its copy holds the copy
    // open for writing until it execs, and exec then fails with ETXTBSY: retry.
    let mut tries = 0;
    let output = loop {
        match command.output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            result => break result.expect("run weir"),
        }
    };
    Run {
        code: output.status.code().expect("weir exited by a signal"),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

impl Run {
    fn expect(self, code: i32, what: &str) -> Self {
        assert_eq!(self.code, code, "{what}: exit status\nstdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        self
    }
}

/// `init` → `build` → `test` in a fresh temporary folder; returns the folder (kept alive) and the
/// project path.
fn init_build_test(lang: &str, template: &str) -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    let name = format!("my-{lang}-{template}");
    let project = temp.path().join(&name);
    weir(&["transform", "init", &name, "--lang", lang, "--template", template], temp.path()).expect(0, "init");
    for file in [
        "weir-transform.toml",
        "README.md",
        ".gitignore",
        "samples/example.input.jsonl",
        "samples/example.expected.jsonl",
    ] {
        assert!(project.join(file).is_file(), "init wrote no {file}");
    }
    assert!(project.join("weir-sdk/wit").is_dir(), "init copied no SDK");
    // The SDK came out of the binary, into the fresh HOME's cache, one folder per Weir build.
    let sdks: Vec<_> =
        std::fs::read_dir(temp.path().join("home/.cache/weir/sdk")).expect("no SDK written out").flatten().collect();
    assert_eq!(sdks.len(), 1, "one SDK folder per Weir build");
    assert!(
        sdks[0].path().join("guest-sdk/wit/transform.wit").is_file()
            && sdks[0].path().join("scripts/setup.sh").is_file()
    );

    let build = weir(&["transform", "build"], &project).expect(0, "build");
    let component = project.join(format!("target/{name}.wasm"));
    assert!(
        build.stdout.contains(&format!("{}: weir:transform@", component.display()))
            && build.stdout.contains("process (func)"),
        "build printed no check of {}:\n{}",
        component.display(),
        build.stdout
    );
    // A second build of the unchanged project runs no toolchain (which rewrites the component).
    let built = std::fs::metadata(&component).and_then(|m| m.modified()).unwrap();
    let again = weir(&["transform", "build"], &project).expect(0, "second build");
    assert!(again.stderr.contains("is up to date"), "{}", again.stderr);
    assert!(again.stdout.contains("process (func)"), "the second build printed no check:\n{}", again.stdout);
    assert_eq!(std::fs::metadata(&component).and_then(|m| m.modified()).unwrap(), built, "the component was rebuilt");
    let test = weir(&["transform", "test"], &project).expect(0, "test of the generated project");
    assert!(test.stdout.contains(&format!("{name} passed (1 sample(s))")), "{}", test.stdout);
    assert!(!test.stderr.contains("test: building"), "test rebuilt a fresh component:\n{}", test.stderr);
    readme_commands_work(&project);
    (temp, project)
}

/// Runs every `weir` command of the generated README's shell block, as an author pastes them:
/// each exits 0, and `weir transform run` over the sample input prints the sample's expected
/// outputs (it failed on the sample format in every language).
fn readme_commands_work(project: &Path) {
    let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
    let block = readme.split("```sh\n").nth(1).and_then(|rest| rest.split("```").next()).expect("a ```sh block");
    let commands: Vec<Vec<&str>> = block
        .lines()
        .map(|line| line.split('#').next().unwrap_or_default().split_whitespace().collect::<Vec<_>>())
        .filter(|words| words.first() == Some(&"weir"))
        .collect();
    assert!(commands.iter().any(|c| c.starts_with(&["weir", "transform", "run"])), "no run command in:\n{block}");
    let expected = std::fs::read_to_string(project.join("samples/example.expected.jsonl")).unwrap();
    let json_lines = |text: &str| -> Vec<serde_json::Value> {
        text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    for command in &commands {
        let run = weir(&command[1..], project).expect(0, &format!("the README's `{}`", command.join(" ")));
        if command.starts_with(&["weir", "transform", "run"]) {
            assert_eq!(json_lines(&run.stdout), json_lines(&expected), "`{}`:\n{}", command.join(" "), run.stderr);
        }
    }
}

/// Changes the expected outputs so that `test` fails with a diff naming the line, then accepts
/// the actual outputs with `--update`, which restores the generated file.
fn broken_expected_output_fails_with_a_diff(project: &Path, line: usize, from: &str, to: &str) {
    let expected = project.join("samples/example.expected.jsonl");
    let original = std::fs::read_to_string(&expected).unwrap();
    let lines: Vec<&str> = original.lines().collect();
    assert!(lines[line].contains(from), "{} has no `{from}` in line {line}", expected.display());
    let broken_line = lines[line].replacen(from, to, 1);
    let broken = original.replacen(lines[line], &broken_line, 1);
    std::fs::write(&expected, &broken).unwrap();

    let test = weir(&["transform", "test"], project).expect(1, "test with a broken expected output");
    for part in [
        "FAILED samples/example",
        "--- expected",
        "+++ actual",
        &format!("-{broken_line}"),
        &format!("+{}", lines[line]),
    ] {
        assert!(test.stderr.contains(part), "no `{part}` in:\n{}", test.stderr);
    }
    assert!(!test.stderr.contains("test: building"), "a changed sample rebuilt the component:\n{}", test.stderr);

    weir(&["transform", "test", "--update"], project).expect(0, "test --update");
    assert_eq!(std::fs::read_to_string(&expected).unwrap(), original, "--update wrote other outputs");
    weir(&["transform", "test"], project).expect(0, "test after --update");
}

/// Appends `tail` to the project's `source` so that its line `line` (counting from the appended
/// text's first) is a syntax error: `build` fails with exit status 2, naming the file, the line
/// and `message` before anything else, without the build tool's traceback; the source is then
/// restored.
fn syntax_error_fails_the_build(project: &Path, source: &str, tail: &str, line: usize, message: &str) {
    let path = project.join(source);
    let original = std::fs::read_to_string(&path).unwrap();
    assert!(original.ends_with('\n'));
    std::fs::write(&path, format!("{original}{tail}")).unwrap();
    let build = weir(&["transform", "build"], project).expect(2, "build with a syntax error");
    let located = format!("error: {source}:{}: {message}", original.lines().count() + line);
    assert!(build.stderr.starts_with(&located), "no `{located}` first in:\n{}", build.stderr);
    assert!(!build.stderr.contains("Traceback") && !build.stderr.contains("componentize"), "{}", build.stderr);
    std::fs::write(&path, original).unwrap();
}

#[test]
fn rust_project_builds_and_passes_its_test() {
    let (_temp, project) = init_build_test("rust", "aggregate");
    broken_expected_output_fails_with_a_diff(&project, 2, "\"total\":15", "\"total\":16");
}

#[test]
fn rust_projects_named_alike_each_build_their_own_code() {
    // Cargo tells path packages apart by their path within their workspace: two `greeter`
    // projects sharing a target dir took each other's build as their own.
    let temp = tempfile::tempdir().unwrap();
    let (a, b) = (temp.path().join("a"), temp.path().join("b"));
    for dir in [&a, &b] {
        std::fs::create_dir(dir).unwrap();
        weir(&["transform", "init", "greeter", "--lang", "rust", "--template", "map"], dir).expect(0, "init");
    }
    let source = b.join("greeter/src/lib.rs");
    let text = std::fs::read_to_string(&source).unwrap();
    assert!(text.contains("Hello"), "the map template greets with Hello");
    std::fs::write(&source, text.replace("Hello", "Welcome")).unwrap();
    for dir in [&a, &b] {
        weir(&["transform", "build"], &dir.join("greeter")).expect(0, "build");
    }
    let component = |dir: &Path| std::fs::read(dir.join("greeter/target/greeter.wasm")).unwrap();
    assert_ne!(component(&a), component(&b), "both projects got the same component");
    weir(&["transform", "test"], &a.join("greeter")).expect(0, "test of the unchanged project");
    let test = weir(&["transform", "test"], &b.join("greeter")).expect(1, "test of the changed project");
    assert!(test.stderr.contains("Welcome, Ada!"), "{}", test.stderr);
}

#[test]
fn python_project_builds_and_passes_its_test() {
    // The filter forwards a record with a header: the SDK's forward must carry it.
    let (_temp, project) = init_build_test("python", "filter");
    broken_expected_output_fails_with_a_diff(
        &project,
        1,
        r#"{"key":"channel","value":"web"}"#,
        r#"{"key":"channel","value":"app"}"#,
    );
    syntax_error_fails_the_build(&project, "app.py", "\ndef broken(:\n    pass\n", 2, "SyntaxError: ");
}

#[test]
fn js_project_builds_and_passes_its_test() {
    let (_temp, project) = init_build_test("js", "map");
    broken_expected_output_fails_with_a_diff(&project, 0, "Hello, Ada!", "Hi, Ada!");
    syntax_error_fails_the_build(
        &project,
        "index.js",
        "\nexport function broken() {\n  let a = ;\n}\n",
        3,
        "SyntaxError: Unexpected token ';'",
    );
}

#[test]
fn go_project_builds_passes_its_test_and_fails_it_for_each_kind_of_problem() {
    let (_temp, project) = init_build_test("go", "map");
    broken_expected_output_fails_with_a_diff(&project, 1, "\"lang\":\"en\"", "\"lang\":\"fr\"");

    // A failing unit test in the language's own framework fails `test`.
    let unit_test = project.join("main_test.go");
    std::fs::write(
        &unit_test,
        "package main\n\nimport \"testing\"\n\nfunc TestFails(t *testing.T) { t.Fatal(\"deliberately broken\") }\n",
    )
    .unwrap();
    let test = weir(&["transform", "test"], &project).expect(1, "test with a failing unit test");
    assert!(test.stderr.contains("FAILED unit tests"), "{}", test.stderr);
    assert!(test.stdout.contains("deliberately broken"), "go test's output is missing:\n{}", test.stdout);
    std::fs::remove_file(&unit_test).unwrap();

    // A sample without its expected file says how to write one.
    let input = project.join("samples/example.input.jsonl");
    let second = project.join("samples/second.input.jsonl");
    std::fs::copy(&input, &second).unwrap();
    let test = weir(&["transform", "test"], &project).expect(1, "test with a sample without expected outputs");
    assert!(
        test.stderr.contains("second.expected.jsonl is missing: run `weir transform test --update`"),
        "{}",
        test.stderr
    );
    std::fs::remove_file(&second).unwrap();

    // A record the transform refuses fails the sample, naming the error and the record.
    let mut text = std::fs::read_to_string(&input).unwrap();
    text.push_str("{\"key\": \"u4\", \"value\": {\"nickname\": \"Bo\"}}\n");
    std::fs::write(&input, text).unwrap();
    let test = weir(&["transform", "test"], &project).expect(1, "test with a record the transform refuses");
    assert!(
        test.stderr.contains("the transform failed")
            && test.stderr.contains("value has no string field `name` (at offset 3)"),
        "{}",
        test.stderr
    );

    // A changed source file is rebuilt before the samples run.
    let source = project.join("main.go");
    let code = std::fs::read_to_string(&source).unwrap().replace("\"Hello, \"", "\"Hi, \"");
    std::fs::write(&source, code).unwrap();
    std::fs::write(&input, "{\"key\": \"u1\", \"value\": {\"name\": \"Ada\"}}\n").unwrap();
    let test = weir(&["transform", "test"], &project).expect(1, "test after changing the source");
    assert!(test.stderr.contains("test: building"), "the changed source was not rebuilt:\n{}", test.stderr);
    assert!(
        test.stderr.contains("+{\"headers\":[],\"key\":\"u1\",\"value\":{\"greeting\":\"Hi, Ada!\""),
        "{}",
        test.stderr
    );
}

#[test]
fn a_folder_that_is_no_project_in_a_known_language_is_a_usage_error() {
    let temp = tempfile::tempdir().unwrap();
    let none = temp.path().join("plain");
    std::fs::create_dir(&none).unwrap();
    std::fs::write(none.join("main.c"), "int main(void) { return 0; }\n").unwrap();
    let cobol = temp.path().join("cobol");
    std::fs::create_dir(&cobol).unwrap();
    std::fs::write(cobol.join("weir-transform.toml"), "language = \"cobol\"\n").unwrap();
    let typo = temp.path().join("typo");
    std::fs::create_dir(&typo).unwrap();
    std::fs::write(typo.join("weir-transform.toml"), "langauge = \"go\"\n").unwrap();

    for command in ["build", "test"] {
        let run = weir(&["transform", command, "plain"], temp.path()).expect(2, "a folder without manifest");
        assert!(run.stderr.contains("is not a transform project: it has no weir-transform.toml"), "{}", run.stderr);
        assert!(
            run.stderr.contains("language = \\\"rust\\\"") || run.stderr.contains("language = \"rust\""),
            "{}",
            run.stderr
        );
        let run = weir(&["transform", command, "cobol"], temp.path()).expect(2, "an unknown language");
        assert!(
            run.stderr.contains("unknown language `cobol`: Weir transforms are written in rust, python, js or go"),
            "{}",
            run.stderr
        );
        let run = weir(&["transform", command, "typo"], temp.path()).expect(2, "a misspelt key");
        assert!(
            run.stderr.contains("weir-transform.toml is not valid") && run.stderr.contains("langauge"),
            "{}",
            run.stderr
        );
    }
    let run =
        weir(&["transform", "init", "x", "--lang", "cobol"], temp.path()).expect(2, "init in an unknown language");
    assert!(
        run.stderr.contains("invalid value 'cobol'") && run.stderr.contains("rust, python, js, go"),
        "{}",
        run.stderr
    );
    let run =
        weir(&["transform", "init", "plain", "--lang", "go"], temp.path()).expect(2, "init into a non-empty folder");
    assert!(run.stderr.contains("already exists and is not empty"), "{}", run.stderr);
    let run = weir(&["transform", "init", "9 lives", "--lang", "go"], temp.path()).expect(2, "init with a bad name");
    assert!(run.stderr.contains("`9 lives` cannot name a transform"), "{}", run.stderr);
}
