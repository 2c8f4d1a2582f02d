//! A headless Chromium driven through WebDriver (Debian's `chromium` and `chromium-driver`,
//! installed by scripts/setup.sh's `browser` part): just the commands the dashboard test needs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

/// How long chromedriver may take to answer its first request, and one command to run
/// (generous: Chromium starts slowly on a busy machine).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// A chromedriver process and one browser session of it; both end when dropped.
pub struct Browser {
    driver: Child,
    http: ureq::Agent,
    session: String,
}

impl Browser {
    /// Starts chromedriver on a free local port and a headless Chromium session.
    ///
    /// # Panics
    /// When `chromedriver` or `chromium` is missing (saying how to install them), or the
    /// session cannot start.
    pub fn start() -> Self {
        let chromedriver = find("chromedriver", &["/usr/bin/chromedriver"]);
        let chromium = find("chromium", &["/usr/bin/chromium"]);
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver.display()));
        let http: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(START_TIMEOUT))
            .http_status_as_error(false)
            .build()
            .into();
        let mut browser = Self { driver, http, session: String::new() };
        let base = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while browser.http.get(format!("{base}/status")).call().is_err() {
            assert!(
                started.elapsed() < START_TIMEOUT,
                "chromedriver did not answer on port {port} within {START_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                // Root in a container: no sandbox; /dev/shm may be small.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1100"],
            },
        }}});
        let created = browser.command("POST", &format!("{base}/session"), Some(capabilities));
        browser.session = format!(
            "{base}/session/{}",
            created["sessionId"].as_str().unwrap_or_else(|| panic!("no session id from chromedriver: {created}"))
        );
        browser
    }

    /// Opens `url` in the browser.
    pub fn open(&self, url: &str) {
        self.command("POST", &format!("{}/url", self.session), Some(json!({ "url": url })));
    }

    /// Runs `script` (a function body; `return` gives the result) in the page.
    pub fn eval(&self, script: &str) -> Value {
        self.command("POST", &format!("{}/execute/sync", self.session), Some(json!({ "script": script, "args": [] })))
    }

    /// Evaluates `script` until `done` accepts its result, at most `timeout`; returns that result.
    ///
    /// # Panics
    /// After `timeout`, with the last result and what was waited for, and a screenshot of the
    /// page then saved as [`artifact`]`("timeout.png")`.
    pub fn wait_for(&self, what: &str, script: &str, timeout: Duration, done: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            let value = self.eval(script);
            if done(&value) {
                return value;
            }
            if started.elapsed() >= timeout {
                let shot = artifact("timeout.png");
                self.screenshot(&shot);
                panic!(
                    "the page never showed {what} within {timeout:?}; last seen: {value}; screenshot: {}",
                    shot.display()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Saves a PNG screenshot of the window to `path`.
    pub fn screenshot(&self, path: &Path) {
        let data = self.command("GET", &format!("{}/screenshot", self.session), None);
        let png = base64::engine::general_purpose::STANDARD
            .decode(data.as_str().expect("screenshot as base64"))
            .expect("screenshot is base64");
        std::fs::create_dir_all(path.parent().expect("screenshot directory")).expect("create screenshot directory");
        std::fs::write(path, png).expect("write screenshot");
    }

    /// Sends a WebDriver command; returns its `value`.
    fn command(&self, method: &str, url: &str, body: Option<Value>) -> Value {
        let response = match (method, body) {
            ("POST", body) => self.http.post(url).send_json(body.unwrap_or_else(|| json!({}))),
            ("GET", _) => self.http.get(url).call(),
            (_, _) => self.http.delete(url).call(),
        };
        let mut response = response.unwrap_or_else(|e| panic!("WebDriver {method} {url}: {e}"));
        let status = response.status();
        let reply: Value = response.body_mut().read_json().unwrap_or_else(|e| panic!("WebDriver {method} {url}: {e}"));
        assert!(status.is_success(), "WebDriver {method} {url} answered {status}: {reply}");
        reply["value"].clone()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.http.delete(&self.session).call();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Where test artifacts such as screenshots go: `test-artifacts/<name>` in the target directory,
/// beside the test executables (scripts/test.sh prints it).
pub fn artifact(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let target = exe.parent().and_then(|deps| deps.parent()).expect("target directory");
    target.join("test-artifacts").join(name)
}

/// The first of `candidates` that exists, else `name` found on PATH.
///
/// # Panics
/// When none exists, saying how to install it.
fn find(name: &str, candidates: &[&str]) -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).map(|dir| dir.join(name)).collect::<Vec<_>>())
        .unwrap_or_default();
    candidates.iter().map(PathBuf::from).chain(on_path).find(|p| p.exists()).unwrap_or_else(|| {
        panic!("{name} is missing: run `bash scripts/setup.sh browser` (Debian's chromium and chromium-driver)")
    })
}
