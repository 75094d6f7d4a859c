//! Typed async client for slurmrestd, data parser v0.0.44: the calls the slurm-bridge needs
//! (jobs, external jobs, external nodes, partitions, reservations), token providers that
//! follow a rotated token file, one typed error that keeps Slurm's own messages, and Slurm
//! host list expansion/compression.
//!
//! ```no_run
//! # async fn demo() -> Result<(), slurm_rest::Error> {
//! use slurm_rest::{Client, TokenProvider, models::JobDescMsg};
//! let client = Client::builder("http://127.0.0.1:6820")
//!     .token(TokenProvider::file("/var/run/slurm/token"))
//!     .build()?;
//! let job = JobDescMsg { name: Some("demo".into()), ..Default::default() };
//! let submitted = client.submit_job(&job).await?;
//! println!("job {}", submitted.job_id);
//! # Ok(()) }
//! ```

mod client;
mod error;
pub mod hostlist;
pub mod models;
mod retry;
mod token;

pub use client::{API_PREFIX, Client, ClientBuilder, ClientStats, TOKEN_HEADER, USER_HEADER};
pub use error::{Error, ErrorKind, errno};
pub use models::{SlurmErrorEntry, SlurmWarning};
pub use retry::RetryPolicy;
pub use token::{FileToken, TokenProvider};
