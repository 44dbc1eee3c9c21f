//! The cluster status page (docs/design/status-page.md) in a real headless browser.
//!
//! `ringlet up --nodes 3 --spares 1 --default-memgest rep:3`, a memgest `warm` (rep:2) created
//! through redis-cli and a few keys written into it; Debian's `chromium --headless --dump-dom`
//! then loads node 1's admin page with a virtual-time budget long enough for the page's own
//! script to poll `/api/status` and re-render, and the DOM must list every node (each `<tr
//! data-node-id=N data-state=S>` with the state the JSON gives) and every memgest the map has.
//! Then node 2 (a data node) is SIGKILLed; once `/api/status` on nodes 1 and 3 marks it
//! failed (polled with a deadline), node 3's page, loaded in chromium again, shows node 2 as
//! failed.
//! Meanwhile a thread keeps reading and writing keys through every node: the page's heat map
//! must have a cell per slot range and some with load, its two charts and its per-node load
//! table must be there, and its event log must hold the joins, the bootstrap, the memgest
//! created and, after the kill, node 2's failure and the spare's takeover.
//! Last, a screenshot of that page goes to `target/test-artifacts/status_page.png`.
//!
//! Without a `chromium` binary the browser test prints SKIPPED and passes, unless
//! `RINGLET_REQUIRE_BROWSER` is set (CI), where it fails. The second test checks that the
//! admin token guards the new endpoints like the old ones; it needs no browser.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest one chromium run may take (a cold start in a loaded CI container takes seconds).
const BROWSER_RUN_MAX: Duration = Duration::from_secs(90);
/// Longest the cluster may take to mark a SIGKILLed node failed (lease expiry, default
/// 1-2 s, plus the map push) — generous for a loaded machine.
const FAILURE_DETECTION_MAX: Duration = Duration::from_secs(60);

/// GET with extra header lines (each ending in \r\n): (status line, head, body).
fn http_get(port: u16, path: &str, headers: &str) -> (String, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("admin port");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n{headers}\r\n").unwrap();
    let mut got = String::new();
    s.read_to_string(&mut got).unwrap();
    let (head, body) = got.split_once("\r\n\r\n").expect("HTTP response");
    (
        head.lines().next().unwrap().to_string(),
        head.to_string(),
        body.to_string(),
    )
}

/// The state `/api/status` JSON gives node `id` (`{"id":N,"addr":"...","state":"..."`: serde
/// keeps the struct's field order; only node objects have an `addr` after the `id`).
fn json_node_state(json: &str, id: u32) -> Option<String> {
    let at = json.find(&format!("{{\"id\":{id},\"addr\":\""))?;
    let rest = &json[at..];
    let s = rest.find("\"state\":\"")? + "\"state\":\"".len();
    Some(rest[s..].split('"').next()?.to_string())
}

/// Every `"name":"..."` of the JSON: only memgests have a `name`.
fn json_memgest_names(json: &str) -> Vec<String> {
    json.split("\"name\":\"")
        .skip(1)
        .filter_map(|p| p.split('"').next().map(str::to_string))
        .collect()
}

/// The opening tag of the `<tr>` for node `id` in a DOM dump.
fn node_row_tag(dom: &str, id: u32) -> Option<&str> {
    let at = dom.find(&format!("<tr data-node-id=\"{id}\""))?;
    let end = dom[at..].find('>')?;
    Some(&dom[at..at + end + 1])
}

/// Whether a `chromium` binary runs; with `RINGLET_REQUIRE_BROWSER` set its absence is a
/// failure (CI) rather than a skip.
fn have_chromium() -> bool {
    let have = Command::new("chromium")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        assert!(
            std::env::var_os("RINGLET_REQUIRE_BROWSER").is_none(),
            "chromium is not installed and RINGLET_REQUIRE_BROWSER is set (scripts/setup.sh installs it)"
        );
        eprintln!("SKIPPED status page browser test: chromium is not installed");
    }
    have
}

/// Run headless chromium with `args` then `url`, with a fresh profile and a deadline; its
/// stdout.
fn chromium(args: &[&str], url: &str) -> String {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // A profile per run: two chromiums on one profile refuse to start.
    let profile =
        std::env::temp_dir().join(format!("ringlet-chromium-{}-{run}", std::process::id()));
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn chromium");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + BROWSER_RUN_MAX;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within {BROWSER_RUN_MAX:?} for {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = reader.join().unwrap();
    let stderr = err_reader.join().unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    assert!(
        status.success(),
        "chromium {args:?} {url}: {status}\n{stderr}"
    );
    stdout
}

/// The page's DOM after its script ran: the virtual-time budget lets the 1 s poll fire (and
/// chromium waits for the fetch it starts) before the DOM is dumped.
fn dump_dom(url: &str) -> String {
    chromium(&["--virtual-time-budget=3000", "--dump-dom"], url)
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-c", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli (scripts/setup.sh installs it)");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Start `ringlet up` and return it (stopped on drop) with each node's pid, read from its
/// `node N pid P port X` lines (`common::up` drains them).
fn up_with_pids(args: &[&str]) -> (common::Up, Vec<(u32, u32)>) {
    let log = std::env::temp_dir().join(format!("ringlet-status-page-{}.log", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_ringlet"))
        .args(args)
        .env_remove("RINGLET_REQUIREPASS")
        .env_remove("RINGLET_ADMIN_TOKEN")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("up log file"))
        .spawn()
        .expect("spawn ringlet up");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let up = common::Up(child);
    let mut pids = Vec::new();
    loop {
        let Some(l) = lines.next() else {
            panic!(
                "up exited before it was ready: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        };
        let l = l.expect("read");
        let w: Vec<&str> = l.split_whitespace().collect();
        if let ["node", id, "pid", pid, "port", _] = w.as_slice() {
            pids.push((id.parse().unwrap(), pid.parse().unwrap()));
        }
        if l.starts_with("ringlet cluster ready") {
            break;
        }
    }
    let _ = std::fs::remove_file(&log);
    std::thread::spawn(move || for _ in lines {});
    (up, pids)
}

/// Keep writing and reading keys through node `port` until `stop`: a minimal RESP client
/// that follows MOVED to the key's coordinator (so every node serves some of the load).
/// A failed connection (the kill of a node cuts some) is dropped and the key tried again
/// later through node `port`; the test checks the figures, not this thread.
fn keep_loading(port: u16, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) {
    use std::collections::HashMap;
    let mut conns: HashMap<String, BufReader<TcpStream>> = HashMap::new();
    let first = format!("127.0.0.1:{port}");
    let mut i: u64 = 0;
    // Bounded by `stop` and by an op count (an hour of it at most, never reached).
    while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < 10_000_000 {
        let key = format!("load:{}", i % 500);
        let cmd = if i.is_multiple_of(3) {
            format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$1\r\nx\r\n", key.len())
        } else {
            format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len())
        };
        i += 1;
        let mut addr = first.clone();
        for _hop in 0..3 {
            match load_one(&mut conns, &addr, &cmd) {
                Ok(Some(moved)) => addr = moved,
                Ok(None) => break,
                Err(()) => {
                    conns.remove(&addr);
                    std::thread::sleep(Duration::from_millis(50));
                    break;
                }
            }
        }
    }
}

/// Send `cmd` on the connection to `addr` (opened if needed) and read its reply: the MOVED
/// target, if it was moved.
fn load_one(
    conns: &mut std::collections::HashMap<String, BufReader<TcpStream>>,
    addr: &str,
    cmd: &str,
) -> Result<Option<String>, ()> {
    if !conns.contains_key(addr) {
        let s = TcpStream::connect(addr).map_err(|_| ())?;
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        conns.insert(addr.to_string(), BufReader::new(s));
    }
    let c = conns.get_mut(addr).ok_or(())?;
    c.get_mut().write_all(cmd.as_bytes()).map_err(|_| ())?;
    let mut line = String::new();
    if c.read_line(&mut line).map_err(|_| ())? == 0 {
        return Err(());
    }
    if let Some(n) = line
        .strip_prefix('$')
        .and_then(|n| n.trim().parse::<i64>().ok())
    {
        // The values are one byte; anything larger is not this test's reply.
        if n > 1024 {
            return Err(());
        }
        if n >= 0 {
            let mut body = vec![0u8; n as usize + 2];
            c.read_exact(&mut body).map_err(|_| ())?;
        }
    }
    Ok(line
        .strip_prefix("-MOVED ")
        .and_then(|rest| rest.split_whitespace().nth(1))
        .map(str::to_string))
}

/// Every node of the JSON and every memgest name appear in the DOM; with `same_states`, each
/// node's row has the state the JSON gives (only when no state can change between the two
/// reads: after a failure the spare's takeover may land in between).
fn assert_dom_matches(dom: &str, json: &str, nodes: &[u32], same_states: bool) {
    for &id in nodes {
        let state = json_node_state(json, id).unwrap_or_else(|| panic!("node {id} in {json}"));
        let tag = node_row_tag(dom, id).unwrap_or_else(|| panic!("no row for node {id}:\n{dom}"));
        assert!(
            !same_states || tag.contains(&format!("data-state=\"{state}\"")),
            "node {id}: JSON says {state}, the page's row is {tag}"
        );
    }
    let names = json_memgest_names(json);
    assert!(names.len() >= 3, "none, the default and warm: {json}");
    for n in names {
        assert!(
            dom.contains(&format!("<tr data-memgest=\"{n}\">")),
            "memgest {n} missing from the page:\n{dom}"
        );
    }
}

#[test]
fn status_page_in_a_headless_browser_shows_nodes_memgests_and_a_failure() {
    if !have_chromium() {
        return;
    }
    let base = common::free_base(6);
    let b = base.to_string();
    let admin = |node: u32| base + 10_000 + (node as u16 - 1);
    // The control plane's own status port (free_base checked base + 10_000.. + 5).
    let control_status = base + 10_005;
    let cs = control_status.to_string();
    let (up, pids) = up_with_pids(&[
        "up",
        "--nodes",
        "3",
        "--spares",
        "1",
        "--port",
        &b,
        "--status-port",
        &cs,
        "--default-memgest",
        "rep:3",
        "--memory-mb",
        "64",
    ]);
    assert_eq!(pids.len(), 4, "{pids:?}");
    // A memgest that fits 3 nodes' placement groups (2 data + 1 redundant), and keys in it.
    assert_eq!(
        redis_cli(base, &["memgest", "create", "warm", "rep", "2"]),
        "OK"
    );
    for k in 0..20 {
        assert_eq!(
            redis_cli(base, &["set", &format!("w:{k}"), "v", "memgest", "warm"]),
            "OK"
        );
    }

    // Load through every node while the pages are looked at (the heat map and the charts).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let loader = {
        let stop = stop.clone();
        std::thread::spawn(move || keep_loading(base, stop))
    };
    // The sampler closes a window every second: wait (bounded) until node 1's view shows a
    // busy range, so the page below has load to colour.
    let deadline = Instant::now() + FAILURE_DETECTION_MAX;
    loop {
        let json = http_get(admin(1), "/api/status", "").2;
        let v: serde_json::Value = serde_json::from_str(&json).expect("status JSON");
        let busy = v["ranges"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["reads_per_sec"].as_f64().unwrap_or(0.0) > 0.0)
            .count();
        if busy > 0
            && v["load"]["history"]
                .as_array()
                .is_some_and(|h| h.len() >= 2)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no range shows load within {FAILURE_DETECTION_MAX:?}: {json}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Before any failure: node 1's page lists all four nodes and every memgest.
    let (status, head, json) = http_get(admin(1), "/api/status", "");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(head.contains("Content-Type: application/json"), "{head}");
    for (id, state) in [(1, "active"), (2, "active"), (3, "active"), (4, "spare")] {
        assert_eq!(json_node_state(&json, id).as_deref(), Some(state), "{json}");
    }
    assert!(json_memgest_names(&json).contains(&"warm".to_string()));
    let url1 = format!("http://127.0.0.1:{}/", admin(1));
    let dom = dump_dom(&url1);
    assert_dom_matches(&dom, &json, &[1, 2, 3, 4], true);
    assert!(
        dom.contains("data-refreshes=\""),
        "the page's script never refreshed from /api/status:\n{dom}"
    );
    assert!(dom.contains("<tr data-memgest=\"warm\">"));
    // The slot bar has one segment per range, each naming its coordinator.
    assert!(dom.contains("id=\"slotbar\""));
    assert!(dom.contains("class=\"seg state-active\""), "{dom}");
    // The heat map: one cell per slot range; the load runs, so some cell has a load.
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let ranges = v["ranges"].as_array().unwrap();
    assert!(dom.contains("<div id=\"heatmap\">"), "{dom}");
    for r in ranges {
        assert!(
            dom.contains(&format!(
                "data-first=\"{}\" data-last=\"{}\" data-ops=",
                r["first"], r["last"]
            )),
            "no heat map cell for range {r}:\n{dom}"
        );
    }
    let loaded_cells = dom
        .split("data-ops=\"")
        .skip(1)
        .filter_map(|p| p.split('"').next())
        .filter(|o| o.parse::<f64>().is_ok_and(|o| o > 0.0))
        .count();
    assert!(loaded_cells > 0, "no heat map cell shows load:\n{dom}");
    // The charts, drawn by the script from the node's windows, and the per-node table.
    for chart in ["chart-ops", "chart-latency"] {
        assert!(
            dom.contains(&format!("<svg id=\"{chart}\"")),
            "{chart}:\n{dom}"
        );
    }
    assert!(dom.contains("data-series=\"reads_per_sec\""), "{dom}");
    assert!(dom.contains("data-series=\"read_p99_us\""), "{dom}");
    for id in 1..=3 {
        assert!(
            dom.contains(&format!("<tr data-load-node=\"{id}\">")),
            "node {id} missing from the load table:\n{dom}"
        );
    }
    // The event log: the joins, the bootstrap and the memgest created above.
    assert!(dom.contains("<table id=\"events\">"), "{dom}");
    for kind in ["node_joined", "bootstrapped", "memgest_created"] {
        assert!(
            dom.contains(&format!("data-kind=\"{kind}\"")),
            "no {kind} event:\n{dom}"
        );
    }
    assert!(dom.contains("memgest warm created (rep:2)"), "{dom}");
    // INFO commandstats and /metrics count what was served.
    let stats = redis_cli(base, &["info", "commandstats"]);
    assert!(stats.contains("cmdstat_set:calls="), "{stats}");
    let (_, _, metrics) = http_get(admin(1), "/metrics", "");
    for series in [
        "ringlet_command_duration_seconds_bucket{class=\"read\",le=\"+Inf\"}",
        "ringlet_slot_range_reads_total{first=",
        "ringlet_slot_range_ops_per_second{first=",
        "ringlet_commands_total{command=\"get\"}",
    ] {
        assert!(metrics.contains(series), "{series} missing:\n{metrics}");
    }
    // The old plain text is still served.
    let (status, _, text) = http_get(admin(1), "/status.txt", "");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(text.contains("cluster_state:ok"), "{text}");

    // SIGKILL node 2, a data node; wait (bounded) until the maps of node 1 and of node 3 (whose
    // page is loaded next) mark it failed.
    let (_, victim) = *pids.iter().find(|(id, _)| *id == 2).unwrap();
    assert!(Command::new("kill")
        .args(["-KILL", &victim.to_string()])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + FAILURE_DETECTION_MAX;
    for node in [1, 3] {
        loop {
            let json = http_get(admin(node), "/api/status", "").2;
            if json_node_state(&json, 2).as_deref() == Some("failed") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {node}'s map does not mark node 2 failed within {FAILURE_DETECTION_MAX:?}: {json}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    // Node 3's page (another node than the one asked so far) shows node 2 failed.
    let json3 = http_get(admin(3), "/api/status", "").2;
    let url3 = format!("http://127.0.0.1:{}/", admin(3));
    let dom = dump_dom(&url3);
    let tag = node_row_tag(&dom, 2).expect("node 2 still listed");
    assert!(tag.contains("data-state=\"failed\""), "{tag}\n{dom}");
    assert_dom_matches(&dom, &json3, &[1, 2, 3, 4], false);
    assert!(dom.contains("data-refreshes=\""), "{dom}");
    // The kill is in the control plane's event log, about node 2, and so is the spare's
    // takeover of its roles.
    assert!(
        dom.contains("data-kind=\"node_failed\" data-node=\"2\""),
        "the failure of node 2 is not in the event log:\n{dom}"
    );
    assert!(dom.contains("node 2 failed"), "{dom}");
    assert!(
        dom.contains("data-kind=\"spare_promoted\" data-node=\"2\""),
        "no spare took over node 2's roles in the event log:\n{dom}"
    );

    // The control plane's status port: its event log has the failure too, its /metrics
    // the map's states, and its page links every node's page.
    let (status, head, events) = http_get(control_status, "/api/events", "");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(head.contains("application/json"), "{head}");
    let ev: serde_json::Value = serde_json::from_str(&events).unwrap();
    assert!(
        ev.as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "node_failed" && e["about_node"] == 2),
        "{events}"
    );
    let (_, _, cm) = http_get(control_status, "/metrics", "");
    assert!(
        cm.contains("ringlet_control_nodes{state=\"failed\"} 1"),
        "{cm}"
    );
    assert!(
        cm.contains("ringlet_control_events_logged{kind=\"node_failed\"} 1"),
        "{cm}"
    );
    assert!(
        cm.contains("ringlet_control_memgest_keys{memgest=\"warm\",kind=\"rep:2\"}"),
        "{cm}"
    );
    let (_, _, page) = http_get(control_status, "/", "");
    for node in 1..=4u32 {
        assert!(
            page.contains(&format!("href=\"//127.0.0.1:{}/\"", admin(node))),
            "no link to node {node}'s page: {page}"
        );
    }
    assert!(
        page.contains("<tr data-node-id=\"2\" data-state=\"failed\""),
        "{page}"
    );

    // A screenshot for humans (and the lead's review).
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    let png: PathBuf = dir.join("status_page.png");
    let _ = std::fs::remove_file(&png);
    chromium(
        &[
            &format!("--screenshot={}", png.display()),
            "--window-size=1280,2600",
            "--virtual-time-budget=3000",
            "--hide-scrollbars",
        ],
        &url3,
    );
    let len = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(len > 0, "no screenshot at {}", png.display());
    eprintln!("status page screenshot: {} ({len} bytes)", png.display());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = loader.join();
    drop(up);
}

/// `--admin-token`: the JSON, the HTML page and the text page all answer 401 without the
/// bearer token and carry no figures; with it they answer with their content types.
#[test]
fn admin_token_guards_the_status_api_and_pages() {
    let base = common::free_base(4);
    let b = base.to_string();
    let up = common::up(&[
        "up",
        "--nodes",
        "3",
        "--port",
        &b,
        "--admin-token",
        "tok-9c2a",
    ]);
    let port = base + 10_000;
    for path in ["/api/status", "/", "/status", "/status.txt"] {
        let (status, _, body) = http_get(port, path, "");
        assert_eq!(status, "HTTP/1.1 401 Unauthorized", "{path}");
        assert!(!body.contains("epoch"), "{path}: {body}");
    }
    let auth = "Authorization: Bearer tok-9c2a\r\n";
    let (status, head, json) = http_get(port, "/api/status", auth);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(head.contains("application/json"), "{head}");
    assert_eq!(json_node_state(&json, 1).as_deref(), Some("active"));
    let (status, head, html) = http_get(port, "/", auth);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(head.contains("text/html"), "{head}");
    assert!(html.contains("<tr data-node-id=\"3\" data-state=\"active\""));
    // No external assets: nothing is loaded from anywhere but this node.
    assert!(!html.contains("src="), "{html}");
    assert!(!html.contains("http://") && !html.contains("https://"));
    let (status, head, _) = http_get(port, "/status.txt", auth);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(head.contains("text/plain"), "{head}");
    drop(up);
}
