//! Network namespaces for real node processes (one namespace per node, a bridge in the root
//! namespace for the control plane and the test's clients), and nft partitions between them.
//! Used by the partition and nemesis tests; the topology is drawn in `partition.rs`.

use super::Client;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The client port of every node (each node has its own address).
pub const NODE_PORT: u16 = 7001;

pub fn sh(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

pub fn sh_must(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The namespaces, veths and bridge of one test; removed on drop (after the processes).
pub struct Net {
    tag: String,
    subnet: u8,
    pub nodes: usize,
    pub spares: usize,
    pub total: usize,
    bridge: String,
    /// Node processes by id (`ip netns exec` execs the node, so the pid is the node's).
    pub procs: Vec<(u32, Child)>,
    control: Option<Child>,
}

impl Net {
    pub fn ns(&self, id: u32) -> String {
        format!("rl{}-{id}", self.tag)
    }
    pub fn node_ip(&self, id: u32) -> Ipv4Addr {
        Ipv4Addr::new(10, 98, self.subnet, 10 + id as u8)
    }
    pub fn host_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 98, self.subnet, 1)
    }
    pub fn node_addr(&self, id: u32) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(self.node_ip(id)), NODE_PORT)
    }
    pub fn control_addr(&self) -> String {
        format!("{}:7000", self.host_ip())
    }

    /// Build the topology, or say why it cannot be built here.
    pub fn new(test_index: u8, nodes: usize, spares: usize) -> Result<Net, String> {
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        if !sh(&["nft", "--version"]) {
            return Err("nft not installed".into());
        }
        let pid = std::process::id();
        let tag = format!("{}{}", pid % 10_000, test_index);
        let subnet = ((pid as u64 * 7 + test_index as u64 * 53) % 250 + 1) as u8;
        let bridge = format!("rb{tag}");
        let net = Net {
            tag: tag.clone(),
            subnet,
            nodes,
            spares,
            total: nodes + spares,
            bridge: bridge.clone(),
            procs: Vec::new(),
            control: None,
        };
        if !sh(&["ip", "link", "add", &bridge, "type", "bridge"]) {
            return Err("cannot create a bridge (no CAP_NET_ADMIN?)".into());
        }
        sh_must(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", net.host_ip()),
            "dev",
            &bridge,
        ]);
        sh_must(&["ip", "link", "set", &bridge, "up"]);
        for id in 1..=net.total as u32 {
            let ns = net.ns(id);
            let veth = format!("rl{tag}v{id}");
            sh_must(&["ip", "netns", "add", &ns]);
            sh_must(&[
                "ip", "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ]);
            sh_must(&["ip", "link", "set", &veth, "master", &bridge, "up"]);
            sh_must(&[
                "ip",
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", net.node_ip(id)),
                "dev",
                "eth0",
            ]);
            sh_must(&["ip", "-n", &ns, "link", "set", "eth0", "up"]);
            sh_must(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        }
        Ok(net)
    }

    pub fn start(&mut self) {
        let exe = env!("CARGO_BIN_EXE_ringlet-cluster");
        let control = Command::new(exe)
            .args([
                "control",
                "--port",
                "7000",
                "--bind",
                &self.host_ip().to_string(),
                "--nodes",
                &self.nodes.to_string(),
                "--spares",
                &self.spares.to_string(),
                "--default-memgest",
                "rep:3",
            ])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        self.control = Some(control);
        std::thread::sleep(Duration::from_millis(300));
        for id in 1..=self.total as u32 {
            self.start_node(id);
        }
        // Ready: every active node answers CLUSTER INFO with cluster_state:ok.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut c = Client::new(self.seeds());
        loop {
            assert!(Instant::now() < deadline, "cluster did not become ready");
            c.refresh();
            if (0..16384u16)
                .step_by(512)
                .all(|s| c.slot_owner(s).is_some())
            {
                let r = c.call(
                    vec![b"SET".to_vec(), b"ready".to_vec(), b"1".to_vec()],
                    true,
                    Instant::now() + Duration::from_secs(5),
                );
                if matches!(r, super::Res::Ok(ringlet_codec::resp::Reply::Simple(ref s)) if s == b"OK")
                {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn start_node(&mut self, id: u32) {
        let exe = env!("CARGO_BIN_EXE_ringlet-cluster");
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns(id), exe, "node", "--id"])
            .arg(id.to_string())
            .args(["--port", &NODE_PORT.to_string(), "--bind"])
            .arg(self.node_ip(id).to_string())
            .args(["--control", &self.control_addr()])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        self.procs.push((id, child));
    }

    pub fn seeds(&self) -> Vec<SocketAddr> {
        (1..=self.total as u32).map(|i| self.node_addr(i)).collect()
    }

    /// Seeds with `victim` last, so map refreshes do not wait on it while it is cut off.
    pub fn seeds_victim_last(&self, victim: u32) -> Vec<SocketAddr> {
        let mut s: Vec<SocketAddr> = (1..=self.total as u32)
            .filter(|&i| i != victim)
            .map(|i| self.node_addr(i))
            .collect();
        s.push(self.node_addr(victim));
        s
    }

    pub fn map(&self) -> ringlet_control::ClusterMap {
        let out = Command::new(env!("CARGO_BIN_EXE_ringlet-cluster"))
            .args(["map", "--control", &self.control_addr()])
            .output()
            .unwrap();
        assert!(out.status.success());
        ringlet_control::ClusterMap::from_json(String::from_utf8_lossy(&out.stdout).trim()).unwrap()
    }

    /// Drop, inside `victim`'s namespace, every packet to or from `peers`.
    pub fn cut(&self, victim: u32, peers: &[Ipv4Addr]) {
        let set = peers
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let rules = format!(
            "table inet rlpart {{\n  chain input {{ type filter hook input priority 0; policy accept; ip saddr {{ {set} }} drop; }}\n  chain output {{ type filter hook output priority 0; policy accept; ip daddr {{ {set} }} drop; }}\n}}\n"
        );
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.ns(victim), "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(rules.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success(), "nft rules not loaded");
    }

    pub fn heal(&self, victim: u32) {
        sh_must(&[
            "ip",
            "netns",
            "exec",
            &self.ns(victim),
            "nft",
            "delete",
            "table",
            "inet",
            "rlpart",
        ]);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for (_, c) in &mut self.procs {
            // `ip netns exec` execs the node, so the pid is the node's.
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(c) = &mut self.control {
            let _ = c.kill();
            let _ = c.wait();
        }
        for id in 1..=self.total as u32 {
            sh(&["ip", "netns", "del", &self.ns(id)]);
            sh(&["ip", "link", "del", &format!("rl{}v{id}", self.tag)]);
        }
        sh(&["ip", "link", "del", &self.bridge]);
    }
}

/// The topology with `nodes` + `spares` started, or None (printed) where it cannot be built
/// and `RINGLET_REQUIRE_NETNS` is not set.
pub fn setup(test_index: u8, nodes: usize, spares: usize) -> Option<Net> {
    match Net::new(test_index, nodes, spares) {
        Ok(mut n) => {
            n.start();
            Some(n)
        }
        Err(why) => {
            if std::env::var("RINGLET_REQUIRE_NETNS").as_deref() == Ok("1") {
                panic!("partition tests required (RINGLET_REQUIRE_NETNS=1) but: {why}");
            }
            eprintln!("SKIPPED: partition tests need root and nft ({why})");
            None
        }
    }
}
