//! A node's regions work for one-sided readers whatever pages they got: 4 KiB pages, shmem
//! transparent huge pages (only if `/sys/kernel/mm/transparent_hugepage/shmem_enabled`
//! honours advice) or hugetlbfs (only if the pool can hold the whole region), falling back
//! silently when the kernel refuses. One test per binary: the page policy is process-wide.

use parking_lot::Mutex;
use ringlet_engine::{
    set_huge_pages, shmem_thp_honoured, Engine, EngineConfig, HugePages, PageBacking,
};
use ringlet_shm::testkit::{check_value, make_value};
use ringlet_shm::ShmReader;
use ringlet_shm_exporter::{Exporter, ExporterConfig};
use std::sync::Arc;

#[test]
fn readers_work_whatever_pages_the_regions_got() {
    let thp = if shmem_thp_honoured() {
        PageBacking::Transparent
    } else {
        PageBacking::Base
    };
    for (n, pages) in [HugePages::Off, HugePages::Transparent, HugePages::Hugetlb]
        .into_iter()
        .enumerate()
    {
        set_huge_pages(pages);
        let engine = Engine::new(EngineConfig {
            memory_bytes_max: 8 << 20,
            index_buckets_initial: 16,
            ..EngineConfig::default()
        })
        .unwrap();
        let (ib, db) = engine.page_backing();
        for b in [ib, db] {
            match pages {
                HugePages::Off => assert_eq!(b, PageBacking::Base),
                HugePages::Transparent => assert_eq!(b, thp),
                HugePages::Hugetlb => {
                    assert!(b == PageBacking::Hugetlb || b == thp, "{b:?}")
                }
            }
        }
        let engine = Arc::new(Mutex::new(engine));
        let dir = std::env::temp_dir().join(format!("ringlet-shm-hp-{n}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let x = Exporter::spawn(engine.clone(), ExporterConfig::new(dir.join("s"))).unwrap();
        let mut r = ShmReader::connect(x.path()).unwrap();
        if ib != PageBacking::Base {
            // The client maps at a 2 MiB boundary so the kernel can use huge page entries.
            let (p, _) = r.index_mapping().unwrap();
            assert_eq!(p as usize % (2 << 20), 0, "{pages:?}");
        }
        // Enough keys for several index upsizes (old tables are punched or, on hugetlb,
        // zeroed) and deletes (slab space freed).
        let keys: Vec<Vec<u8>> = (0..3000).map(|i| format!("hp{i}").into_bytes()).collect();
        for (i, k) in keys.iter().enumerate() {
            r.set(k, &make_value(k, i as u64, 50 + i % 700)).unwrap();
        }
        for k in keys.iter().step_by(3) {
            assert!(r.del(k).unwrap());
        }
        engine.lock().tick(0);
        for (i, k) in keys.iter().enumerate() {
            let got = r.get(k).unwrap();
            if i % 3 == 0 {
                assert!(got.is_none(), "{pages:?} key {i}");
            } else {
                assert_eq!(check_value(k, &got.unwrap().1), Ok(i as u64), "{pages:?}");
            }
        }
        let mut seen = 0;
        r.mget_with(&keys, |i, item| {
            seen += 1;
            assert_eq!(item.is_none(), i % 3 == 0, "{pages:?} key {i}");
            if let Some((_, v)) = item {
                assert_eq!(check_value(&keys[i], v), Ok(i as u64));
            }
        })
        .unwrap();
        assert_eq!(seen, keys.len());
        assert_eq!(r.stats().fallbacks, 0);
    }
}
