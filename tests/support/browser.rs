//! Debian's Chromium, headless, driven through its chromedriver (WebDriver) on a free
//! loopback port, for tests of the operator page. Fails the test, saying how to install
//! them, when either is missing.

use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use tempfile::TempDir;

/// Longest wait for chromedriver to answer, and for anything the page should show.
pub const WAIT: Duration = Duration::from_secs(20);

/// A chromedriver process and one browser session in it.
pub struct Browser {
    /// The session.
    pub client: Client,
    /// chromedriver, in a process group of its own with the browser it starts: the
    /// group is killed on drop (killing chromedriver alone leaves Chromium running).
    driver: tokio::process::Child,
    /// The browser's profile.
    _profile: TempDir,
}

fn installed(command: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {command}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = self
            .driver
            .id()
            .and_then(|id| rustix::process::Pid::from_raw(id as i32));
        if let Some(group) = group {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
    }
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session.
    pub async fn start() -> Browser {
        for command in ["chromium", "chromedriver"] {
            assert!(
                installed(command),
                "{command} is not installed: `apt-get install chromium chromium-driver` \
                 (scripts/test.sh does)"
            );
        }
        let port = super::free_port();
        let driver = tokio::process::Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("starting chromedriver");
        let profile = tempfile::tempdir().expect("tempdir");
        let options = serde_json::json!({
            "binary": "/usr/bin/chromium",
            "args": [
                "--headless=new",
                // Tests run as root, where Chromium's sandbox cannot start.
                "--no-sandbox",
                "--disable-dev-shm-usage",
                "--disable-gpu",
                "--window-size=1400,1800",
                format!("--user-data-dir={}", profile.path().display()),
            ],
        });
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("goog:chromeOptions".into(), options);
        let url = format!("http://127.0.0.1:{port}");
        let started = tokio::time::Instant::now();
        let client = loop {
            let connector = HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => break client,
                Err(e) if started.elapsed() < WAIT => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("no browser session from chromedriver at {url}: {e}"),
            }
        };
        Browser {
            client,
            driver,
            _profile: profile,
        }
    }

    /// The text of the element `css` selects, once it exists.
    pub async fn text(&self, css: &str) -> String {
        let element = self
            .client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css:?} on the page: {e}"));
        element.text().await.expect("element text")
    }

    /// Waits until the text of `css` satisfies `ok`; returns it.
    pub async fn text_until(&self, css: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let started = tokio::time::Instant::now();
        loop {
            let text = match self.client.find(Locator::Css(css)).await {
                Ok(element) => element.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            if ok(&text) {
                return text;
            }
            assert!(
                started.elapsed() < WAIT,
                "waited {WAIT:?} for {what}; {css:?} shows {text:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Types `text` into the field with this id.
    pub async fn type_into(&self, id: &str, text: &str) {
        let field = self.client.find(Locator::Id(id)).await;
        let field = field.unwrap_or_else(|e| panic!("no field #{id}: {e}"));
        field.send_keys(text).await.expect("typing");
    }

    /// Empties the field with this id.
    pub async fn clear(&self, id: &str) {
        let field = self.client.find(Locator::Id(id)).await;
        let field = field.unwrap_or_else(|e| panic!("no field #{id}: {e}"));
        field.clear().await.expect("clearing");
    }

    /// Clicks the element with this id.
    pub async fn click(&self, id: &str) {
        let element = self.client.find(Locator::Id(id)).await;
        let element = element.unwrap_or_else(|e| panic!("no element #{id}: {e}"));
        element.click().await.expect("clicking");
    }

    /// Runs `script` in the page and returns its value.
    pub async fn eval(&self, script: &str) -> serde_json::Value {
        self.client
            .execute(script, Vec::new())
            .await
            .unwrap_or_else(|e| panic!("running {script:?}: {e}"))
    }

    /// Saves a PNG of the window at `path`.
    pub async fn screenshot(&self, path: &std::path::Path) {
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::write(path, png).expect("saving the screenshot");
    }
}
