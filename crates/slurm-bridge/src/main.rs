//! The `slurm-bridge` binary; see [`slurm_bridge::cli`].

fn main() -> std::process::ExitCode {
    slurm_bridge::cli::main()
}
