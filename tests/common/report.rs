//! What the fast (`tests/cli/report.rs`) and slow (`tests/llama/report.rs`) tests share.

use std::path::Path;
use std::process::Command;

pub(crate) const CHROMIUM: &str = "/usr/bin/chromium";

/// Chromium's output for `page`: (the DOM it built, its stderr), with console messages logged
/// to stderr (`…:INFO:CONSOLE:…`). `extra` adds flags (a screenshot).
pub(crate) fn headless(page: &Path, profile: &Path, extra: &[String]) -> (String, String) {
    let url = format!("file://{}", page.display());
    let o = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("run chromium");
    assert!(
        o.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

pub(crate) fn console_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains(":CONSOLE")).collect()
}

/// The negative control: the same policy as a report page, with the hostile string left
/// unescaped, must log console messages here; otherwise the check below could not fail.
pub(crate) fn console_check_can_fail(dir: &Path) {
    let page = dir.join("control.html");
    std::fs::write(
        &page,
        format!("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\"></head><body>{HOSTILE}</body></html>"),
    )
    .expect("control page");
    let (_, err) = headless(&page, &dir.join("profile-control"), &[]);
    assert!(
        !console_lines(&err).is_empty(),
        "the control page logged nothing: console messages are not being captured\n{err}"
    );
}

/// Chromium loads the page with no console message, and the marks in its DOM are `rows`.
pub(crate) fn check_in_chromium(page: &Path, dir: &Path, rows: usize, shot: &Path) -> String {
    console_check_can_fail(dir);
    let (dom, err) = headless(
        page,
        &dir.join("profile"),
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1100,2600".into(),
        ],
    );
    let console = console_lines(&err);
    assert!(console.is_empty(), "console messages: {console:#?}");
    assert_eq!(
        dom.matches("<rect class=\"mark\"").count(),
        rows,
        "marks in the DOM"
    );
    assert!(!dom.contains("<img"), "an element was injected");
    assert!(!dom.contains("<script"), "a script element is in the page");
    let png = std::fs::read(shot).expect("screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    eprintln!("screenshot: {} ({} bytes)", shot.display(), png.len());
    dom
}

/// A string a record may hold that would run script if it reached the page unescaped.
pub(crate) const HOSTILE: &str = "</script><img src=x onerror=alert(1)><svg onload=alert(2)>";
