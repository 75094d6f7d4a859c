//! Slurm accounting for an instance: a MariaDB server and slurmdbd, their configuration.
//!
//! Each accounting instance runs its own `mariadbd` (data folder `mysql/` of the instance, copied
//! from a pristine one made once in the cached root file system) on a loopback port, and its own
//! `slurmdbd` (slurmdbd.conf mode 600) on another; slurm.conf points slurmctld at that slurmdbd.

use crate::paths::INSTANCE_MOUNT;

/// Pristine MariaDB data folder inside the root file system, made by `mariadb-install-db` when the
/// root file system is built; each instance copies it instead of initialising its own.
pub const DB_TEMPLATE: &str = "/var/lib/slurm-testenv/mysql-template";

/// The database slurmdbd keeps its records in.
pub const DB_NAME: &str = "slurm_acct_db";

/// The MariaDB user slurmdbd connects as (its password is random per instance).
pub const DB_USER: &str = "slurm";

/// Server options shared by `mariadb-install-db` (the template) and every `mariadbd`: small and
/// fast rather than durable (an instance's database lives as long as the instance).
pub const MARIADBD_OPTIONS: &[&str] = &[
    "--skip-name-resolve",
    "--innodb-buffer-pool-size=32M",
    "--innodb-log-file-size=16M",
    "--innodb-undo-tablespaces=0",
    "--innodb-flush-log-at-trx-commit=0",
    // No fsync at all (deprecated in MariaDB 11, still honoured): DDL syncs every table it makes.
    "--innodb-flush-method=nosync",
    "--innodb-doublewrite=0",
    "--innodb-use-native-aio=0",
    "--innodb-lock-wait-timeout=900",
    "--max-allowed-packet=64M",
    "--skip-log-bin",
    // MariaDB 11.4+ makes a TLS certificate at every start unless told not to (2 s here).
    "--skip-ssl",
    // slurmdbd refuses to run with it (a write conflict would make it exit).
    "--innodb-snapshot-isolation=OFF",
];

/// Folder of the instance's database, inside the root file system.
pub fn datadir() -> String {
    format!("{INSTANCE_MOUNT}/mysql")
}

/// The unix socket of the instance's mariadbd, inside the root file system.
pub fn db_socket() -> String {
    format!("{INSTANCE_MOUNT}/mysql.sock")
}

/// `mariadbd` command line for the instance: its data folder, socket, log and pid file in the
/// instance folder, TCP only on 127.0.0.1:`port`, and the init file that creates slurmdbd's
/// database and user.
pub fn mariadbd_argv(port: u16) -> Vec<String> {
    let d = INSTANCE_MOUNT;
    let mut argv: Vec<String> = vec![
        "mariadbd".into(),
        "--no-defaults".into(),
        "--user=root".into(),
        format!("--datadir={}", datadir()),
        format!("--socket={}", db_socket()),
        format!("--pid-file={d}/mariadbd.pid"),
        format!("--log-error={d}/mariadbd.log"),
        format!("--tmpdir={d}/mysql-tmp"),
        "--bind-address=127.0.0.1".into(),
        format!("--port={port}"),
        format!("--init-file={d}/mysql-init.sql"),
    ];
    argv.extend(MARIADBD_OPTIONS.iter().map(|o| o.to_string()));
    argv
}

/// SQL run by mariadbd at start (`--init-file`): slurmdbd's database and user.
pub fn init_sql(password: &str) -> String {
    format!(
        "CREATE DATABASE IF NOT EXISTS {DB_NAME};
CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{password}';
CREATE USER IF NOT EXISTS '{DB_USER}'@'localhost' IDENTIFIED BY '{password}';
GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'127.0.0.1';
GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'localhost';
"
    )
}

/// slurmdbd.conf: auth/slurm with the instance's key (and auth/jwt, for slurmrestd's `slurmdbd`
/// endpoints), slurmdbd on `dbd_port`, the database on 127.0.0.1:`db_port`.
pub fn render_slurmdbd_conf(dbd_port: u16, db_port: u16, password: &str) -> String {
    let d = INSTANCE_MOUNT;
    format!(
        "# Written by slurm-testenv for one isolated test instance.
AuthType=auth/slurm
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={d}/jwt_hs256.key
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={dbd_port}
SlurmUser=root
PidFile={d}/slurmdbd.pid
LogFile={d}/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={db_port}
StorageUser={DB_USER}
StoragePass={password}
StorageLoc={DB_NAME}
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurmdbd_conf_names_ports_and_database() {
        let text = render_slurmdbd_conf(7001, 7002, "pw");
        assert!(text.contains("DbdPort=7001\n"));
        assert!(text.contains("StoragePort=7002\n"));
        assert!(text.contains("StoragePass=pw\n"));
        assert!(text.contains("StorageLoc=slurm_acct_db\n"));
        assert!(text.contains("StorageType=accounting_storage/mysql\n"));
    }

    #[test]
    fn mariadbd_listens_on_loopback_only() {
        let argv = mariadbd_argv(7003);
        assert_eq!(argv[1], "--no-defaults", "must come first");
        assert!(argv.contains(&"--bind-address=127.0.0.1".to_string()));
        assert!(argv.contains(&"--port=7003".to_string()));
        assert!(argv.contains(&"--datadir=/slurm-testenv/mysql".to_string()));
    }

    #[test]
    fn init_sql_creates_database_and_user() {
        let sql = init_sql("secret");
        assert!(sql.contains("CREATE DATABASE IF NOT EXISTS slurm_acct_db;"));
        assert!(sql.contains("'slurm'@'127.0.0.1' IDENTIFIED BY 'secret'"));
    }
}
