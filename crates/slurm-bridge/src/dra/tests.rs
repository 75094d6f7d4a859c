//! Table tests of the DRA device logic.

use super::*;
use crate::k8s::slim_pod::Pod;
use k8s_openapi::api::resource::v1::ResourceSlice;
use proptest::prelude::*;
use serde_json::json;
use std::collections::BTreeSet;

fn slice(
    name: &str,
    node: &str,
    driver: &str,
    pool: &str,
    devices: serde_json::Value,
) -> ResourceSlice {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": node,
                 "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices},
    }))
    .expect("slice")
}

/// `dra.cpu` devices: (cpu, core, socket, type).
pub fn cpu_devices(cpus: &[(i64, i64, i64, i64)]) -> serde_json::Value {
    json!(
        cpus.iter()
            .map(|(c, core, s, t)| json!({
                "name": format!("cpu{c}"),
                "attributes": {
                    "dra.cpu/cpuID": {"int": c}, "dra.cpu/coreID": {"int": core},
                    "dra.cpu/socketID": {"int": s}, "dra.cpu/coreType": {"int": t},
                }
            }))
            .collect::<Vec<_>>()
    )
}

fn example_gpus(idx: &[i64]) -> serde_json::Value {
    json!(
        idx.iter()
            .map(|i| json!({"name": format!("gpu-{i}"), "attributes": {"index": {"int": i}}}))
            .collect::<Vec<_>>()
    )
}

#[test]
fn gres_index_lists() {
    assert_eq!(parse_gres_index("0").unwrap(), [0]);
    assert_eq!(parse_gres_index("0-1").unwrap(), [0, 1]);
    assert_eq!(parse_gres_index("0,2-3").unwrap(), [0, 2, 3]);
    assert_eq!(parse_gres_index("IDX:1-2").unwrap(), [1, 2]);
    assert_eq!(parse_gres_index("[3,1]").unwrap(), [3, 1]);
    for bad in ["", " ", "a", "1-", "-1", "3-1", "1,,2", "0-99999999"] {
        assert!(parse_gres_index(bad).is_err(), "{bad:?}");
    }
}

proptest! {
    /// A list of ranges expands to exactly their members, in order, once each.
    #[test]
    fn gres_index_expands(ranges in proptest::collection::vec((0u32..200, 0u32..5), 1..6)) {
        let text = ranges.iter().map(|(a, l)| if *l == 0 { a.to_string() } else { format!("{a}-{}", a + l) })
            .collect::<Vec<_>>().join(",");
        let mut want = Vec::new();
        for (a, l) in &ranges {
            for i in *a..=a + l {
                if !want.contains(&i) { want.push(i); }
            }
        }
        prop_assert_eq!(parse_gres_index(&text).unwrap(), want);
    }
}

#[test]
fn inventory_and_gres_strings() {
    let s = [
        slice(
            "cpu",
            "n1",
            "dra.cpu",
            "n1",
            cpu_devices(&[
                (0, 0, 0, 1),
                (1, 0, 0, 1),
                (2, 0, 1, 1),
                (3, 0, 1, 1),
                (4, 1, 0, 3),
                (5, 1, 1, 3),
            ]),
        ),
        slice(
            "gpu",
            "n1",
            GPU_EXAMPLE,
            "pool-numa0",
            example_gpus(&[0, 1, 2, 3]),
        ),
        slice("other", "n2", GPU_EXAMPLE, "x", example_gpus(&[0])),
    ];
    let inv = NodeInventory::from_slices("n1", &s);
    assert_eq!((inv.cpus.slurm_cpus(), inv.cpus.slurm_cores()), (4, 2));
    assert_eq!(
        inv.gres_and_conf().unwrap(),
        (
            "gpu:gpu.example.com:4".into(),
            "count=4,name=gpu,type=gpu.example.com,file=gpu-0,file=gpu-1,file=gpu-2,file=gpu-3"
                .into()
        )
    );
    let one = NodeInventory::from_slices("n2", &s);
    assert_eq!(
        one.gres_and_conf().unwrap().1,
        "count=1,name=gpu,type=gpu.example.com,file=gpu-0"
    );
    assert_eq!(
        NodeInventory::from_slices("n3", &s)
            .gres_and_conf()
            .unwrap(),
        (String::new(), String::new())
    );
    // Nvidia: names gpu-<n> only.
    let nv = [slice(
        "nv",
        "n1",
        GPU_NVIDIA,
        "n1",
        json!([{"name": "gpu-1"}, {"name": "gpu-0"}, {"name": "mig-1"}]),
    )];
    let inv = NodeInventory::from_slices("n1", &nv);
    assert_eq!(inv.gres_and_conf().unwrap().0, "gpu:gpu.nvidia.com:2");
    // Two slices of one driver merge.
    let split = [
        slice("a", "n1", GPU_EXAMPLE, "p", example_gpus(&[0, 1])),
        slice("b", "n1", GPU_EXAMPLE, "p", example_gpus(&[2])),
    ];
    assert_eq!(
        NodeInventory::from_slices("n1", &split)
            .gres_and_conf()
            .unwrap()
            .0,
        "gpu:gpu.example.com:3"
    );
    // Two GPU drivers: refused.
    let mixed = [split[0].clone(), nv[0].clone()];
    assert!(matches!(
        NodeInventory::from_slices("n1", &mixed).gres_and_conf(),
        Err(DraError::MixedGpus(_))
    ));
}

fn pod(containers: serde_json::Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": containers}}))
        .unwrap()
}

#[test]
fn asks_and_claims() {
    let s = [
        slice(
            "cpu",
            "n1",
            "dra.cpu",
            "n1",
            cpu_devices(&[(0, 0, 0, 1), (1, 0, 0, 1), (2, 1, 0, 1), (3, 1, 0, 1)]),
        ),
        slice(
            "gpu",
            "n1",
            GPU_EXAMPLE,
            "pool-numa0",
            example_gpus(&[0, 1, 2, 3]),
        ),
    ];
    let inv = NodeInventory::from_slices("n1", &s);
    let gpu_pod = |n: &str| {
        pod(
            json!([{"name": "c", "image": "x", "resources": {"limits": {"deviceclass.resource.kubernetes.io/gpu.example.com": n}}}]),
        )
    };
    assert_eq!(DeviceAsk::of(&pod(json!([{"name": "c"}]))).unwrap(), None);
    let a = DeviceAsk::of(&gpu_pod("2")).unwrap().unwrap();
    let b = DeviceAsk::of(&gpu_pod("1")).unwrap().unwrap();
    let alloc = NodeAllocation::parse(Some("0x3"), [(Some(GPU_EXAMPLE), Some("1-3"))]).unwrap();
    let shares = share("n1", &inv, &alloc, &[&a, &b]).unwrap();
    assert_eq!(shares[0].gpus[GPU_EXAMPLE], [1, 2]);
    assert_eq!(shares[1].gpus[GPU_EXAMPLE], [3]);
    let classes: BTreeSet<String> = [GPU_EXAMPLE.to_string(), "dra.cpu".into()].into();
    let parts = claim_parts(
        "n1",
        &inv,
        &a,
        &shares[0],
        &classes,
        &GresDrivers::builtin(),
    )
    .unwrap();
    let devices: Vec<(&str, &str)> = parts
        .results
        .iter()
        .map(|r| (r.pool.as_str(), r.device.as_str()))
        .collect();
    assert_eq!(devices, [("pool-numa0", "gpu-1"), ("pool-numa0", "gpu-2")]);
    assert_eq!(
        parts.requests[0]
            .exactly
            .as_ref()
            .unwrap()
            .selectors
            .as_ref()
            .unwrap()[0]
            .cel
            .as_ref()
            .unwrap()
            .expression,
        "device.attributes['gpu.example.com'].index in [1,2]"
    );
    assert_eq!(parts.mappings[0].request_name, "gpu");
    // Too many asked.
    let c = DeviceAsk::of(&gpu_pod("2")).unwrap().unwrap();
    assert!(matches!(
        share("n1", &inv, &alloc, &[&a, &c]),
        Err(DraError::NotEnoughGres { .. })
    ));
    // An index the slices do not have.
    let far = Share {
        gpus: [(GPU_EXAMPLE.to_string(), vec![7])].into(),
        ..Default::default()
    };
    assert!(matches!(
        claim_parts("n1", &inv, &a, &far, &classes, &GresDrivers::builtin()),
        Err(DraError::GpuNotOnNode { index: 7, .. })
    ));
    // CPU: bitmap {0} with SMT pair {0,1}.
    let cpu_pod = pod(
        json!([{"name": "c", "resources": {"requests": {"deviceclass.resource.kubernetes.io/dra.cpu": "2"}}}]),
    );
    let ask = DeviceAsk::of(&cpu_pod).unwrap().unwrap();
    let alloc = NodeAllocation::parse(Some("0x1"), []).unwrap();
    let sh = share("n1", &inv, &alloc, &[&ask]).unwrap();
    let parts = claim_parts("n1", &inv, &ask, &sh[0], &classes, &GresDrivers::builtin()).unwrap();
    let ex = parts.requests[0].exactly.as_ref().unwrap();
    assert_eq!(ex.count, Some(2));
    assert_eq!(
        ex.selectors.as_ref().unwrap()[0]
            .cel
            .as_ref()
            .unwrap()
            .expression,
        "device.attributes['dra.cpu'].cpuID in [0,1]"
    );
    assert_eq!(
        parts
            .results
            .iter()
            .map(|r| r.device.as_str())
            .collect::<Vec<_>>(),
        ["cpu0", "cpu1"]
    );
    // No dra.cpu DeviceClass.
    assert_eq!(
        claim_parts(
            "n1",
            &inv,
            &ask,
            &sh[0],
            &[GPU_EXAMPLE.to_string()].into(),
            &GresDrivers::builtin()
        ),
        Err(DraError::NoCpuDeviceClass)
    );
    // A GPU class in two containers.
    let two = pod(json!([
        {"name": "a", "resources": {"limits": {"deviceclass.resource.kubernetes.io/gpu.example.com": "1"}}},
        {"name": "b", "resources": {"limits": {"deviceclass.resource.kubernetes.io/gpu.example.com": "1"}}},
    ]));
    assert!(matches!(
        DeviceAsk::of(&two),
        Err(DraError::ClassInTwoContainers { .. })
    ));
}

/// Kubernetes' DRA test driver's devices: `device-00` .. with no attributes, one pool named
/// after the node.
fn test_driver_devices(n: usize) -> serde_json::Value {
    json!(
        (0..n)
            .map(|i| json!({"name": format!("device-{i:02}")}))
            .collect::<Vec<_>>()
    )
}

const TEST_DRIVER: &str = "test-driver.cdi.k8s.io";

fn admin_drivers() -> GresDrivers {
    GresDrivers::with([
        GresDriver {
            name: TEST_DRIVER.into(),
            index: DeviceIndex::NameNumber,
        },
        GresDriver {
            name: "gpu.intel.com".into(),
            index: DeviceIndex::Attribute,
        },
    ])
}

/// A driver of the config's: its devices are GRES with the index it names (the number at the
/// end of the name, or the `index` attribute); without it in the list they are not devices the
/// bridge uses, and the built-ins read as before.
#[test]
fn admin_drivers_inventory() {
    let drivers = admin_drivers();
    let mut devices = test_driver_devices(4);
    // Out of order, and one whose name ends in no number (left out).
    devices.as_array_mut().unwrap().reverse();
    devices
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "spare"}));
    let s = [slice("t", "n1", TEST_DRIVER, "n1", devices)];
    assert!(NodeInventory::from_slices("n1", &s).is_empty());
    let inv = NodeInventory::with_drivers("n1", &s, &drivers);
    let got: Vec<(&str, i64)> = inv.gpus[TEST_DRIVER]
        .iter()
        .map(|d| (d.name.as_str(), d.index))
        .collect();
    assert_eq!(
        got,
        [
            ("device-00", 0),
            ("device-01", 1),
            ("device-02", 2),
            ("device-03", 3)
        ]
    );
    assert_eq!(
        inv.gres_and_conf().unwrap(),
        (
            "gpu:test-driver.cdi.k8s.io:4".into(),
            "count=4,name=gpu,type=test-driver.cdi.k8s.io,file=device-00,file=device-01,\
             file=device-02,file=device-03"
                .into()
        )
    );
    // An attribute-indexed driver: `index` or `<driver>/index`, negative ones left out.
    let intel = [slice(
        "i",
        "n2",
        "gpu.intel.com",
        "p",
        json!([
            {"name": "card1", "attributes": {"gpu.intel.com/index": {"int": 1}}},
            {"name": "card0", "attributes": {"index": {"int": 0}}},
            {"name": "bad", "attributes": {"index": {"int": -1}}},
        ]),
    )];
    let inv = NodeInventory::with_drivers("n2", &intel, &drivers);
    assert_eq!(inv.gres_and_conf().unwrap().0, "gpu:gpu.intel.com:2");
    assert_eq!(inv.gpus["gpu.intel.com"][0].name, "card0");
    // The built-ins are unchanged by the list: nvidia reads gpu-<n> names only.
    let nv = [slice(
        "nv",
        "n1",
        GPU_NVIDIA,
        "n1",
        json!([{"name": "gpu-1"}, {"name": "mig-1"}]),
    )];
    assert_eq!(
        NodeInventory::with_drivers("n1", &nv, &drivers),
        NodeInventory::from_slices("n1", &nv)
    );
    // A built-in and an admin driver on one node: one GPU type per node.
    let both = [s[0].clone(), nv[0].clone()];
    assert!(matches!(
        NodeInventory::with_drivers("n1", &both, &drivers).gres_and_conf(),
        Err(DraError::MixedGpus(_))
    ));
}

/// A claim for a name-indexed driver's devices: results name the devices Slurm's indices stand
/// for, the selector names the driver (DRA's CEL cannot see device names).
#[test]
fn admin_driver_claim() {
    let drivers = admin_drivers();
    let s = [slice("t", "n1", TEST_DRIVER, "n1", test_driver_devices(4))];
    let inv = NodeInventory::with_drivers("n1", &s, &drivers);
    let p = pod(json!([{"name": "c", "resources": {"limits": {
        "deviceclass.resource.kubernetes.io/test-driver.cdi.k8s.io": "2"}}}]));
    let ask = DeviceAsk::of(&p).unwrap().unwrap();
    let alloc = NodeAllocation::parse(None, [(Some(TEST_DRIVER), Some("1,3"))]).unwrap();
    let sh = share("n1", &inv, &alloc, &[&ask]).unwrap();
    let classes: BTreeSet<String> = [TEST_DRIVER.to_string()].into();
    let parts = claim_parts("n1", &inv, &ask, &sh[0], &classes, &drivers).unwrap();
    let got: Vec<(&str, &str, &str)> = parts
        .results
        .iter()
        .map(|r| (r.driver.as_str(), r.pool.as_str(), r.device.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (TEST_DRIVER, "n1", "device-01"),
            (TEST_DRIVER, "n1", "device-03")
        ]
    );
    let ex = parts.requests[0].exactly.as_ref().unwrap();
    assert_eq!(ex.device_class_name, TEST_DRIVER);
    assert_eq!(ex.count, Some(2));
    assert_eq!(
        ex.selectors.as_ref().unwrap()[0]
            .cel
            .as_ref()
            .unwrap()
            .expression,
        "device.driver == 'test-driver.cdi.k8s.io'"
    );
    assert_eq!(parts.mappings[0].request_name, REQUEST_GPU);
}
