//! The smart client over TLS (issue 10): a three-node rep:3 cluster in this process whose
//! client ports serve TLS only (the files `ringlet up --tls-*` takes, from a throwaway CA made
//! here), and whose member links are then mutual TLS too. `ClusterClient` with
//! `ClientConfig::tls` fetches the map, routes, writes and reads across slots over native
//! frames; without TLS, or trusting another CA, it gets nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ringlet_client::{ClientTls, ClusterClient, ClusterConfig};
use ringlet_cluster::launch::{run_control, run_node, ControlOpts, NodeOpts};
use ringlet_cluster::tls::TlsFiles;
use ringlet_types::MemgestKind;

/// ca.pem, node.pem (127.0.0.1, signed by the CA), node.key, and other-ca.pem.
fn make_certs(dir: &Path) -> (TlsFiles, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
    let ca_of = |name: &str| {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        (cert, key)
    };
    let (ca, ca_key) = ca_of("ringlet test CA");
    let (other, _) = ca_of("some other CA");
    let mut p = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    p.subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    p.distinguished_name
        .push(DnType::CommonName, "ringlet node");
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, &ca, &ca_key).unwrap();
    let files = TlsFiles {
        cert: dir.join("node.pem"),
        key: dir.join("node.key"),
        ca: dir.join("ca.pem"),
    };
    std::fs::write(&files.ca, ca.pem()).unwrap();
    std::fs::write(&files.cert, cert.pem()).unwrap();
    std::fs::write(&files.key, key.serialize_pem()).unwrap();
    let other_ca = dir.join("other-ca.pem");
    std::fs::write(&other_ca, other.pem()).unwrap();
    (files, other_ca)
}

fn cfg(tls: Option<ClientTls>) -> ClusterConfig {
    let mut c = ClusterConfig::default();
    c.client.timeout = Duration::from_secs(10);
    c.client.seed = Some(7);
    c.client.retries_max = 1;
    c.client.tls = tls;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_client_speaks_native_frames_over_tls() {
    let dir = std::env::temp_dir().join(format!("ringlet-client-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (files, other_ca) = make_certs(&dir);
    let (svc, caddr) = run_control(&ControlOpts {
        bind: "127.0.0.1:0".parse().unwrap(),
        expect_nodes: 3,
        active: 3,
        default_memgest: Some(MemgestKind::Rep { r: 3 }),
        s: 2,
        d: 1,
        lease_ms: 1500,
        // Test harness: ec resharding is exercised here.
        ec_moves: true,
    })
    .await
    .unwrap();
    let mut nodes = Vec::new();
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for id in 1..=3 {
        let (n, a) = run_node(&NodeOpts {
            id,
            bind: "127.0.0.1:0".parse().unwrap(),
            peer_port: 0,
            control: caddr.to_string(),
            lease_ms: 1500,
            memory_bytes: 64 << 20,
            requirepass: None,
            tls: Some(files.clone()),
            admin_port: None,
            admin_token: None,
        })
        .await
        .unwrap();
        nodes.push(n);
        addrs.push(a);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "cluster did not bootstrap");
        let e = svc.map().epoch;
        if svc.map().placement.is_some()
            && nodes.iter().all(|n| n.map().is_some_and(|m| m.epoch == e))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let seed = addrs[1].to_string();

    // Plain TCP: the node drops what is not a ClientHello; the map fetch fails (retried
    // until the deadline: a plaintext client cannot tell this from a node not yet up).
    let mut plain = cfg(None);
    plain.client.timeout = Duration::from_secs(2);
    assert!(
        ClusterClient::connect(&[&seed], plain).await.is_err(),
        "a plaintext client got the map from a TLS-only port"
    );
    // A client that trusts another CA fails the handshake.
    let wrong = ClientTls::from_ca_file(&other_ca).unwrap();
    match ClusterClient::connect(&[&seed], cfg(Some(wrong))).await {
        Err(ringlet_client::Error::Tls { message, .. }) => {
            assert!(message.contains("certificate"), "{message}")
        }
        Err(e) => panic!("wrong error for an untrusted certificate: {e}"),
        Ok(_) => panic!("a client trusting another CA connected"),
    }
    // A missing CA file is a configuration error naming it.
    let missing = ClientTls::from_ca_file(&dir.join("nope.pem")).unwrap_err();
    assert!(missing.to_string().contains("nope.pem"), "{missing}");

    let tls = ClientTls::from_ca_file(&files.ca).unwrap();
    let c = ClusterClient::connect(&[&seed], cfg(Some(tls)))
        .await
        .unwrap();
    let keys: Vec<String> = (0..200).map(|i| format!("tls:{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        c.set(k.as_bytes(), format!("v{i}").as_bytes(), Default::default())
            .await
            .unwrap();
    }
    for (i, k) in keys.iter().enumerate() {
        let got = c.get(k.as_bytes()).await.unwrap().value;
        assert_eq!(got.as_deref(), Some(format!("v{i}").as_bytes()), "{k}");
    }
    // Cross-slot MGET over every node, and a large value (many TLS records).
    let got = c.mget(&keys).await.unwrap();
    assert_eq!(got.len(), keys.len());
    for (i, v) in got.iter().enumerate() {
        assert_eq!(v.value.as_deref(), Some(format!("v{i}").as_bytes()));
    }
    let big = vec![b'x'; 4 << 20];
    c.set(b"tls:big", &big, Default::default()).await.unwrap();
    assert_eq!(
        c.get(b"tls:big").await.unwrap().value.as_deref(),
        Some(&big[..])
    );
    for n in &nodes {
        n.stop();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
