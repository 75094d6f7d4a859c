//! How long a fake container runs and how it exits, read from the pod's annotations or
//! guessed from its command (`sleep N`, `sh -c "...; sleep N; exit 3"`).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::{ANNOTATION_DURATION, ANNOTATION_EXIT_CODE};

/// What a fake container (or pod) does once started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunPlan {
    /// How long it runs; `None` means until it is deleted.
    pub duration: Option<Duration>,
    /// Exit code when it ends on its own.
    pub exit_code: i32,
}

impl RunPlan {
    const FOREVER: RunPlan = RunPlan {
        duration: None,
        exit_code: 0,
    };
}

/// The plan of a whole pod: annotations first, then the containers' commands. The pod ends
/// when its longest container ends; its exit code is the first non-zero one.
/// Bad annotation values are reported in the returned warning and otherwise ignored.
pub fn plan_for_pod(pod: &Pod) -> (RunPlan, Option<String>) {
    let annotations = pod.metadata.annotations.as_ref();
    let mut warning = None;
    let from_annotation_duration = match annotations.and_then(|a| a.get(ANNOTATION_DURATION)) {
        Some(v) => match parse_annotation_duration(v) {
            Ok(d) => Some(d),
            Err(e) => {
                warning = Some(format!(
                    "annotation {ANNOTATION_DURATION}={v:?} ignored: {e} (accepted: seconds like \"1.5\", a Go duration like \"1m30s\", or \"infinity\")"
                ));
                None
            }
        },
        None => None,
    };
    let from_annotation_exit = match annotations.and_then(|a| a.get(ANNOTATION_EXIT_CODE)) {
        Some(v) => match v.trim().parse::<i32>() {
            Ok(c) => Some(c),
            Err(_) => {
                warning = Some(format!(
                    "annotation {ANNOTATION_EXIT_CODE}={v:?} ignored: not an integer exit code"
                ));
                None
            }
        },
        None => None,
    };

    let containers: &[Container] = pod.spec.as_ref().map_or(&[], |s| s.containers.as_slice());
    let mut plan = RunPlan {
        duration: Some(Duration::ZERO),
        exit_code: 0,
    };
    if containers.is_empty() {
        plan = RunPlan::FOREVER;
    }
    for c in containers {
        let p = plan_for_command(
            c.command.as_deref().unwrap_or_default(),
            c.args.as_deref().unwrap_or_default(),
        );
        plan.duration = match (plan.duration, p.duration) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        if plan.exit_code == 0 {
            plan.exit_code = p.exit_code;
        }
    }
    if let Some(d) = from_annotation_duration {
        plan.duration = d;
    }
    if let Some(c) = from_annotation_exit {
        plan.exit_code = c;
    }
    (plan, warning)
}

/// Parse the duration annotation: plain seconds (`"1.5"`), a Go duration (`"1m30s"`, `"500ms"`)
/// or `"infinity"`. `None` means "until deleted".
pub fn parse_annotation_duration(v: &str) -> Result<Option<Duration>, String> {
    let v = v.trim();
    if matches!(v, "infinity" | "inf" | "forever") {
        return Ok(None);
    }
    if let Ok(secs) = v.parse::<f64>() {
        return seconds(secs).map(Some);
    }
    parse_go_duration(v).map(Some)
}

fn seconds(secs: f64) -> Result<Duration, String> {
    if secs.is_finite() && (0.0..1e12).contains(&secs) {
        Ok(Duration::from_secs_f64(secs))
    } else {
        Err(format!("{secs} is not a usable number of seconds"))
    }
}

/// Parse a Go `time.ParseDuration` string made of `<number><unit>` parts (ns, us, ms, s, m, h).
fn parse_go_duration(v: &str) -> Result<Duration, String> {
    if v.is_empty() {
        return Err("empty duration".into());
    }
    let mut total = 0f64;
    let mut rest = v;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("missing unit in {v:?}"))?;
        let num: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("bad number in {v:?}"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            u => return Err(format!("unknown unit {u:?} in {v:?}")),
        };
        total += num * factor;
        rest = &rest[unit_len..];
    }
    seconds(total)
}

/// Parse one GNU `sleep` operand: a number with an optional s/m/h/d suffix, or `infinity`.
fn parse_sleep_operand(op: &str) -> Option<Option<Duration>> {
    if matches!(op, "infinity" | "inf") {
        return Some(None);
    }
    let (num, factor) = match op.char_indices().last()? {
        (i, 's') => (&op[..i], 1.0),
        (i, 'm') => (&op[..i], 60.0),
        (i, 'h') => (&op[..i], 3600.0),
        (i, 'd') => (&op[..i], 86400.0),
        _ => (op, 1.0),
    };
    let n: f64 = num.parse().ok()?;
    seconds(n * factor).ok().map(Some)
}

/// Commands that finish at once; `false` exits 1.
fn quick_command(name: &str) -> Option<i32> {
    match name {
        "true" | ":" | "echo" | "printf" | "hostname" | "date" | "env" | "printenv" | "cat"
        | "ls" | "pwd" | "id" | "whoami" | "uname" | "set" | "export" | "cd" | "test" | "["
        | "nproc" | "sync" => Some(0),
        "false" => Some(1),
        _ => None,
    }
}

fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

fn is_shell(name: &str) -> bool {
    matches!(name, "sh" | "bash" | "ash" | "dash" | "zsh" | "ksh")
}

/// Outcome of interpreting a sequence of simple commands.
#[derive(Default)]
struct Interp {
    total: Duration,
    forever: bool,
    unknown: bool,
    slept: bool,
    last_status: i32,
    exit: Option<i32>,
}

impl Interp {
    /// Interpret one simple command given as words.
    fn simple(&mut self, words: &[String]) {
        if self.exit.is_some() {
            return;
        }
        let mut i = 0;
        while i < words.len() {
            let w = words[i].as_str();
            if w.contains('=') && !w.starts_with('-') && !w.starts_with('=') {
                i += 1; // VAR=value prefix
            } else if matches!(basename(w), "exec" | "nohup" | "env" | "time")
                && i + 1 < words.len()
            {
                i += 1;
            } else {
                break;
            }
        }
        let Some(first) = words.get(i) else {
            return;
        };
        let name = basename(first);
        let rest = &words[i + 1..];
        match name {
            "sleep" => {
                self.slept = true;
                self.last_status = 0;
                for op in rest {
                    match parse_sleep_operand(op) {
                        Some(Some(d)) => self.total += d,
                        Some(None) => self.forever = true,
                        None => {
                            self.last_status = 1;
                        }
                    }
                }
            }
            "exit" => {
                let code = rest
                    .first()
                    .and_then(|c| c.parse::<i32>().ok())
                    .unwrap_or(self.last_status);
                self.exit = Some(code);
            }
            "while" | "until" | "for" | "do" | "done" => {
                // A loop: assume it keeps going until the pod is deleted.
                self.forever = true;
            }
            n if is_shell(n) => match shell_script(rest) {
                Some(script) => self.script(&script),
                None => self.unknown = true,
            },
            n => match quick_command(n) {
                Some(status) => self.last_status = status,
                None => {
                    self.unknown = true;
                    self.last_status = 0;
                }
            },
        }
    }

    /// Interpret a shell script: simple commands separated by `;`, `&&`, `||`, `|`, `&` and
    /// newlines. Quoting is honoured only enough to keep quoted words together.
    fn script(&mut self, script: &str) {
        for cmd in split_commands(script) {
            let words = shell_words(&cmd);
            self.simple(&words);
        }
    }

    fn plan(&self) -> RunPlan {
        let exit_code = self.exit.unwrap_or(self.last_status);
        if self.forever || (self.unknown && !self.slept) {
            RunPlan {
                duration: None,
                exit_code,
            }
        } else {
            RunPlan {
                duration: Some(self.total),
                exit_code,
            }
        }
    }
}

/// For `sh [-flags] -c SCRIPT ...`, the script.
fn shell_script(args: &[String]) -> Option<String> {
    let mut saw_c = false;
    for a in args {
        if saw_c {
            return Some(a.clone());
        }
        if a.starts_with('-') && !a.starts_with("--") && a.contains('c') {
            saw_c = true;
        } else if !a.starts_with('-') {
            return None; // `sh script.sh`: a file we cannot read
        }
    }
    None
}

fn split_commands(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    for c in script.chars() {
        match quote {
            Some(q) => {
                cur.push(c);
                if c == q {
                    quote = None;
                }
            }
            None => match c {
                '\'' | '"' => {
                    quote = Some(c);
                    cur.push(c);
                }
                ';' | '&' | '|' | '\n' | '(' | ')' | '{' | '}' => {
                    if !cur.trim().is_empty() {
                        out.push(std::mem::take(&mut cur));
                    }
                    cur.clear();
                }
                _ => cur.push(c),
            },
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    out
}

fn shell_words(cmd: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in cmd.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => cur.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            None => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}

/// The plan of one container from its `command` and `args`. No command at all means the
/// image's entrypoint, which the agent treats as "runs until deleted".
pub fn plan_for_command(command: &[String], args: &[String]) -> RunPlan {
    let words: Vec<String> = command.iter().chain(args.iter()).cloned().collect();
    if words.is_empty() {
        return RunPlan::FOREVER;
    }
    let mut interp = Interp::default();
    interp.simple(&words);
    interp.plan()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use std::collections::BTreeMap;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn plan(cmd: &[&str]) -> RunPlan {
        plan_for_command(&s(cmd), &[])
    }

    #[test]
    fn sleep_forms() {
        assert_eq!(plan(&["sleep", "1"]).duration, Some(Duration::from_secs(1)));
        assert_eq!(
            plan(&["/bin/sleep", "1.5"]).duration,
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            plan(&["sleep", "2m", "3"]).duration,
            Some(Duration::from_secs(123))
        );
        assert_eq!(plan(&["sleep", "infinity"]).duration, None);
        assert_eq!(
            plan_for_command(&s(&["sleep"]), &s(&["7"])).duration,
            Some(Duration::from_secs(7))
        );
    }

    #[test]
    fn shell_scripts() {
        let p = plan(&["sh", "-c", "echo hi; sleep 5 && echo done"]);
        assert_eq!(p.duration, Some(Duration::from_secs(5)));
        assert_eq!(p.exit_code, 0);
        let p = plan(&["/bin/bash", "-ec", "sleep 2\nexit 3"]);
        assert_eq!(p.duration, Some(Duration::from_secs(2)));
        assert_eq!(p.exit_code, 3);
        let p = plan(&["sh", "-c", "false"]);
        assert_eq!(
            p,
            RunPlan {
                duration: Some(Duration::ZERO),
                exit_code: 1
            }
        );
        assert_eq!(
            plan(&["sh", "-c", "while true; do sleep 1; done"]).duration,
            None
        );
        assert_eq!(
            plan(&["sh", "-c", "'sleep' \"4\""]).duration,
            Some(Duration::from_secs(4))
        );
        assert_eq!(plan(&["sh", "-c", "exec sleep infinity"]).duration, None);
        // The exit stops interpretation.
        let p = plan(&["sh", "-c", "sleep 1; exit 0; sleep 100"]);
        assert_eq!(p.duration, Some(Duration::from_secs(1)));
    }

    #[test]
    fn unknown_and_empty_commands_run_until_deleted() {
        assert_eq!(plan(&[]).duration, None);
        assert_eq!(plan(&["python", "train.py"]).duration, None);
        assert_eq!(plan(&["sh", "script.sh"]).duration, None);
        // A known sleep next to an unknown command: the sleep decides.
        assert_eq!(
            plan(&["sh", "-c", "python x.py; sleep 3"]).duration,
            Some(Duration::from_secs(3))
        );
        assert_eq!(plan(&["echo", "hi"]).duration, Some(Duration::ZERO));
        assert_eq!(
            plan(&["env", "A=1", "sleep", "2"]).duration,
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn annotation_durations() {
        assert_eq!(
            parse_annotation_duration("3"),
            Ok(Some(Duration::from_secs(3)))
        );
        assert_eq!(
            parse_annotation_duration("0.25"),
            Ok(Some(Duration::from_millis(250)))
        );
        assert_eq!(
            parse_annotation_duration("1m30s"),
            Ok(Some(Duration::from_secs(90)))
        );
        assert_eq!(
            parse_annotation_duration("500ms"),
            Ok(Some(Duration::from_millis(500)))
        );
        assert_eq!(parse_annotation_duration("infinity"), Ok(None));
        assert!(parse_annotation_duration("soon").is_err());
        assert!(parse_annotation_duration("-1").is_err());
        assert!(parse_annotation_duration("5x").is_err());
    }

    fn pod(cmds: &[&[&str]], ann: &[(&str, &str)]) -> Pod {
        let containers = cmds
            .iter()
            .enumerate()
            .map(|(i, c)| Container {
                name: format!("c{i}"),
                command: Some(s(c)),
                ..Default::default()
            })
            .collect();
        let mut p = Pod {
            spec: Some(PodSpec {
                containers,
                ..Default::default()
            }),
            ..Default::default()
        };
        p.metadata.annotations = Some(
            ann.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        p
    }

    #[test]
    fn pod_plans() {
        let (p, w) = plan_for_pod(&pod(&[&["sleep", "1"], &["sleep", "4"]], &[]));
        assert_eq!(p.duration, Some(Duration::from_secs(4)));
        assert!(w.is_none());
        let (p, _) = plan_for_pod(&pod(&[&["sleep", "1"], &["sleep", "infinity"]], &[]));
        assert_eq!(p.duration, None);
        let (p, _) = plan_for_pod(&pod(
            &[&["sleep", "infinity"]],
            &[(ANNOTATION_DURATION, "2s"), (ANNOTATION_EXIT_CODE, "7")],
        ));
        assert_eq!(
            p,
            RunPlan {
                duration: Some(Duration::from_secs(2)),
                exit_code: 7
            }
        );
        let (p, w) = plan_for_pod(&pod(&[&["sleep", "1"]], &[(ANNOTATION_EXIT_CODE, "x")]));
        assert_eq!(p.exit_code, 0);
        assert!(w.unwrap().contains(ANNOTATION_EXIT_CODE));
    }
}
