//! Suites on Slurm with accounting under tenants: `sacctmgr`, and the scheduler started with the
//! tenants of a config text.

use super::Env;
use slurm_bridge::config::Config;

/// `sacctmgr -i CMD` (words split on spaces); panics naming the command on failure.
pub fn sacctmgr(env: &Env, cmd: &str) {
    let args: Vec<&str> = cmd.split(' ').collect();
    env.slurm
        .sacctmgr(&args)
        .unwrap_or_else(|e| panic!("sacctmgr {cmd}: {e}"));
}

impl Env {
    /// Starts the scheduler through `slurm` under the `tenants` of the config text `tenants`
    /// and no `defaultTenant` (namespaces no tenant covers are refused).
    pub async fn start_scheduler_with_tenants(&mut self, slurm: slurm_rest::Client, tenants: &str) {
        let tenants = Config::from_yaml(tenants).expect("tenants").tenants;
        self.start_scheduler_opts(slurm, tokio::sync::watch::channel(true).1, |o| {
            o.config.tenants = tenants;
            o.config.default_tenant = None;
        })
        .await;
    }
}
