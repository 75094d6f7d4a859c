//! External nodes created in an instance.

/// An external Slurm node, as `scontrol create` takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    /// Node name or host list (`node-[1-100]` creates a hundred nodes in one call).
    pub name: String,
    pub cpus: u32,
    pub real_memory_mb: u64,
    pub features: Vec<String>,
    /// NodeAddr; must resolve, or slurmctld stalls on DNS (see the notes on real Slurm).
    pub addr: String,
    /// `Gres=` value, e.g. `gpu:gpu.example.com:4`.
    pub gres: Option<String>,
    /// `GresConf=` value, e.g. `count=4,name=gpu,type=gpu.example.com,file=gpu-0,...`.
    pub gres_conf: Option<String>,
}

impl NodeSpec {
    /// A node like the ones `slurm-testenv up` makes: 8 CPUs, 16000 MB, feature `slurm-bridge`.
    pub fn new(name: impl Into<String>) -> Self {
        NodeSpec {
            name: name.into(),
            cpus: 8,
            real_memory_mb: 16000,
            features: vec!["slurm-bridge".into()],
            addr: "127.0.0.1".into(),
            gres: None,
            gres_conf: None,
        }
    }

    /// `count` GPUs of type `gpu_type` with device files `gpu-0..`, so allocations carry indices.
    pub fn with_gpus(mut self, gpu_type: &str, count: u32) -> Self {
        self.gres = Some(format!("gpu:{gpu_type}:{count}"));
        let files: Vec<String> = (0..count).map(|i| format!("file=gpu-{i}")).collect();
        self.gres_conf = Some(format!(
            "count={count},name=gpu,type={gpu_type},{}",
            files.join(",")
        ));
        self
    }

    /// The `scontrol create ...` arguments for this node.
    pub fn scontrol_args(&self) -> Vec<String> {
        let mut args = vec![
            "create".to_string(),
            format!("NodeName={}", self.name),
            format!("NodeAddr={}", self.addr),
            "State=EXTERNAL".to_string(),
            format!("CPUs={}", self.cpus),
            format!("RealMemory={}", self.real_memory_mb),
        ];
        if !self.features.is_empty() {
            args.push(format!("Features={}", self.features.join(",")));
        }
        if let Some(g) = &self.gres {
            args.push(format!("Gres={g}"));
        }
        if let Some(g) = &self.gres_conf {
            args.push(format!("GresConf={g}"));
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_node_args() {
        let args = NodeSpec::new("node-[1-3]").scontrol_args();
        assert_eq!(
            args,
            [
                "create",
                "NodeName=node-[1-3]",
                "NodeAddr=127.0.0.1",
                "State=EXTERNAL",
                "CPUs=8",
                "RealMemory=16000",
                "Features=slurm-bridge"
            ]
        );
    }

    #[test]
    fn gpu_node_args() {
        let args = NodeSpec::new("g1")
            .with_gpus("gpu.example.com", 2)
            .scontrol_args();
        assert!(args.contains(&"Gres=gpu:gpu.example.com:2".to_string()));
        assert!(args.contains(
            &"GresConf=count=2,name=gpu,type=gpu.example.com,file=gpu-0,file=gpu-1".to_string()
        ));
    }
}
