//! Output for `eval "$(... up)"`: the CLIs of both test environments print `export` lines, so
//! the variables reach child processes too (a scheduler started afterwards, a test run).

/// `KEY=value` lines as `export KEY=value` lines, the value single-quoted when it holds anything
/// a shell would interpret.
pub fn exports(lines: &str) -> String {
    lines
        .lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let (key, value) = line.split_once('=').unwrap_or((line, ""));
            let plain = value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-./:@%+,=".contains(c));
            if plain {
                format!("export {key}={value}\n")
            } else {
                format!("export {key}='{}'\n", value.replace('\'', r"'\''"))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::exports;

    #[test]
    fn exports_are_shell_safe() {
        assert_eq!(
            exports("SLURM_REST_URL=http://127.0.0.1:6820\nSLURM_JWT=a.b-c_d\n"),
            "export SLURM_REST_URL=http://127.0.0.1:6820\nexport SLURM_JWT=a.b-c_d\n"
        );
        assert_eq!(
            exports("SLURM_CONF=/run/a b/it's\n"),
            "export SLURM_CONF='/run/a b/it'\\''s'\n"
        );
    }

    #[test]
    fn a_shell_reads_them_back() {
        let lines = exports("A=/x y/it's\nB=plain\n");
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("{lines}sh -c 'printf %s \"$A|$B\"'")])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "/x y/it's|plain");
    }
}
