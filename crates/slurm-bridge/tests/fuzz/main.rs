//! Fuzz targets for every parser of outside input: Slurm host lists, core bitmaps, GRES index
//! lists and DRA CPU maps, Kubernetes quantities, `slurmjob.*` annotations, admin_comment,
//! AdmissionReview bodies, config.yaml and slurmrestd answers.
//!
//! Each target replays its corpus (`tests/fuzz/corpus/<target>/`, kept in the repo; found
//! crashes are added there as regressions) and then `FUZZ_CASES` generated inputs (mutated
//! corpus entries, splices, dictionary tokens, random bytes) from a printed `FUZZ_SEED`.
//! Properties, beyond "never panics": round trips where a formatter exists, and every error
//! names the bad input. A short run is part of `cargo test`; a long one:
//! `FUZZ_CASES=200000 cargo test --release -p slurm-bridge --test fuzz -- --nocapture`.

mod kit;
mod targets;
