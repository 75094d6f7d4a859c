//! Slurm host lists: `node-[1-3,7]`, zero padding `n[001-010]`, several bracket groups
//! `r[1-2]n[1-3]`, and comma-separated lists of such.

/// A malformed host list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid host list {input:?}: {reason}")]
pub struct HostlistError {
    input: String,
    reason: String,
}

impl HostlistError {
    fn new(input: &str, reason: impl Into<String>) -> Self {
        HostlistError {
            input: input.to_string(),
            reason: reason.into(),
        }
    }
}

/// Upper bound of hosts one expression may expand to (guards against `n[0-999999999]`).
pub const MAX_HOSTS: usize = 1 << 20;

/// Upper bound of the bytes of the names one expression may expand to: a million hosts with
/// long names (a 1 KiB prefix before `[0-999999]`) would otherwise take gigabytes. Real
/// host names are at most 64 bytes, so every list within [`MAX_HOSTS`] of such names fits.
pub const MAX_NAME_BYTES: usize = 64 << 20;

/// Expand a host list into host names, in order (duplicates kept, as Slurm does).
///
/// ```
/// assert_eq!(slurm_rest::hostlist::expand("n[01-03],x").unwrap(), ["n01", "n02", "n03", "x"]);
/// ```
pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    let mut out = Vec::new();
    let mut bytes = 0usize;
    for expr in split_top(list)? {
        let expr = expr.trim();
        if expr.is_empty() {
            continue;
        }
        expand_expr(list, expr, &mut out, &mut bytes)?;
    }
    Ok(out)
}

/// Split on commas outside brackets; reject unbalanced brackets.
fn split_top(list: &str) -> Result<Vec<&str>, HostlistError> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' => {
                if depth > 0 {
                    return Err(HostlistError::new(list, "nested '['"));
                }
                depth += 1;
            }
            ']' => {
                if depth == 0 {
                    return Err(HostlistError::new(list, "']' without '['"));
                }
                depth -= 1;
            }
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            c if c.is_whitespace() && depth == 0 => {
                parts.push(&list[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(HostlistError::new(list, "'[' without ']'"));
    }
    parts.push(&list[start..]);
    Ok(parts)
}

/// One piece of an expression: literal text or a bracket group's values.
enum Piece {
    Text(String),
    Group(Vec<String>),
}

fn expand_expr(
    list: &str,
    expr: &str,
    out: &mut Vec<String>,
    bytes: &mut usize,
) -> Result<(), HostlistError> {
    let mut pieces = Vec::new();
    let mut rest = expr;
    // Hosts the expression expands to so far: checked group by group, so that many large
    // groups (`n[0-99999][0-99999]...`) are refused before they are all expanded in memory.
    let mut product = 1usize;
    while let Some(open) = rest.find('[') {
        let close = rest[open..]
            .find(']')
            .map(|c| open + c)
            .ok_or_else(|| HostlistError::new(list, "'[' without ']'"))?;
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_string()));
        }
        let group = expand_group(list, &rest[open + 1..close])?;
        product = product
            .checked_mul(group.len())
            .filter(|n| out.len().saturating_add(*n) <= MAX_HOSTS)
            .ok_or_else(|| HostlistError::new(list, "expands to too many hosts"))?;
        pieces.push(Piece::Group(group));
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_string()));
    }
    let total = pieces.iter().try_fold(1usize, |acc, p| match p {
        Piece::Text(_) => Some(acc),
        Piece::Group(g) => acc.checked_mul(g.len()),
    });
    let n = match total {
        Some(n) if out.len().saturating_add(n) <= MAX_HOSTS => n,
        _ => return Err(HostlistError::new(list, "expands to too many hosts")),
    };
    let name_len: usize = pieces
        .iter()
        .map(|p| match p {
            Piece::Text(t) => t.len(),
            Piece::Group(g) => g.iter().map(String::len).max().unwrap_or(0),
        })
        .sum();
    *bytes = n
        .checked_mul(name_len)
        .and_then(|b| b.checked_add(*bytes))
        .filter(|b| *b <= MAX_NAME_BYTES)
        .ok_or_else(|| {
            HostlistError::new(
                list,
                format!("expands to more than {} MiB of names", MAX_NAME_BYTES >> 20),
            )
        })?;
    let mut names = vec![String::new()];
    for p in &pieces {
        match p {
            Piece::Text(t) => names.iter_mut().for_each(|n| n.push_str(t)),
            Piece::Group(g) => {
                names = names
                    .iter()
                    .flat_map(|n| g.iter().map(move |v| format!("{n}{v}")))
                    .collect();
            }
        }
    }
    out.extend(names);
    Ok(())
}

/// Values of a bracket group such as `1-3,7,010-012`.
fn expand_group(list: &str, group: &str) -> Result<Vec<String>, HostlistError> {
    let mut values = Vec::new();
    for item in group.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(HostlistError::new(list, "empty range in brackets"));
        }
        let (lo, hi) = match item.split_once('-') {
            Some((lo, hi)) => (lo.trim(), hi.trim()),
            None => (item, item),
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo) || !digits(hi) {
            return Err(HostlistError::new(
                list,
                format!("range {item:?} is not N or N-M"),
            ));
        }
        let parse = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| HostlistError::new(list, format!("number {s:?} too large")))
        };
        let (a, b) = (parse(lo)?, parse(hi)?);
        if a > b {
            return Err(HostlistError::new(
                list,
                format!("range {item:?} goes down"),
            ));
        }
        if (b - a) as usize >= MAX_HOSTS || values.len() + (b - a) as usize >= MAX_HOSTS {
            return Err(HostlistError::new(list, "expands to too many hosts"));
        }
        let width = if lo.len() > 1 && lo.starts_with('0') {
            lo.len()
        } else {
            0
        };
        for v in a..=b {
            values.push(format!("{v:0width$}"));
        }
    }
    Ok(values)
}

/// Compress host names into a host list, the inverse of [`expand`]: runs of names that
/// differ only in a trailing number become one bracket group (`n[1-3,7]`, `n[001-010]`).
/// Order is kept: only consecutive names with the same prefix and number width are merged.
///
/// ```
/// assert_eq!(slurm_rest::hostlist::compress(["n1", "n2", "n3", "n7", "x"]), "n[1-3,7],x");
/// ```
pub fn compress<I, S>(hosts: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    // Groups of (prefix, width, numbers) or a literal name without a trailing number.
    struct Group {
        prefix: String,
        width: usize,
        nums: Vec<(u64, usize)>,
    }
    let mut groups: Vec<Result<Group, String>> = Vec::new();
    for h in hosts {
        let h = h.as_ref();
        let Some((prefix, num, width)) = split_number(h) else {
            groups.push(Err(h.to_string()));
            continue;
        };
        if let Some(Ok(g)) = groups.last_mut()
            && g.prefix == prefix
            && g.width == width
        {
            g.nums.push((num, width));
            continue;
        }
        groups.push(Ok(Group {
            prefix: prefix.to_string(),
            width,
            nums: vec![(num, width)],
        }));
    }
    let mut out = Vec::with_capacity(groups.len());
    for g in groups {
        match g {
            Err(name) => out.push(name),
            Ok(g) if g.nums.len() == 1 => {
                out.push(format!("{}{:0w$}", g.prefix, g.nums[0].0, w = g.width))
            }
            Ok(g) => {
                let mut ranges = Vec::new();
                let mut i = 0;
                while i < g.nums.len() {
                    let start = g.nums[i].0;
                    let mut end = start;
                    while i + 1 < g.nums.len() && end.checked_add(1) == Some(g.nums[i + 1].0) {
                        end += 1;
                        i += 1;
                    }
                    ranges.push(if start == end {
                        format!("{start:0w$}", w = g.width)
                    } else {
                        format!("{start:0w$}-{end:0w$}", w = g.width)
                    });
                    i += 1;
                }
                out.push(format!("{}[{}]", g.prefix, ranges.join(",")));
            }
        }
    }
    out.join(",")
}

/// Split `node007` into (`node`, 7, width 3); width 0 means no zero padding. Names whose
/// number has a leading zero keep its width so the name round-trips.
fn split_number(h: &str) -> Option<(&str, u64, usize)> {
    if h.contains(['[', ']', ',']) || h.chars().any(char::is_whitespace) {
        return None;
    }
    let digits = h.bytes().rev().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 18 {
        return None;
    }
    let (prefix, num) = h.split_at(h.len() - digits);
    let value = num.parse().ok()?;
    let width = if num.len() > 1 && num.starts_with('0') {
        num.len()
    } else {
        0
    };
    // A zero-padded group only holds numbers of exactly that width; an unpadded one only
    // numbers whose text has no leading zero: checked by comparing the re-rendered text.
    if format!("{value:0width$}") != num {
        return None;
    }
    Some((prefix, value, width))
}
