//! `ringlet load`: the bulk loader (issue 13, item 5; docs/design/loader.md).
//!
//! Reads rows from CSV, JSON Lines, SQLite or a PostgreSQL query, turns them into records and
//! links by a TOML mapping, and writes them over RESP to a single node or a cluster.
//!
//! ```text
//!   sources ──rows──▶ mapping (templates) ──commands──▶ Writer ──▶ one Pipe per node
//!   (streamed,        key, attributes,                 (route by   (connection)
//!    read twice)      links, link lists                 slot)       │ batches of ≤ 1,024
//!                                                                   ▼ commands, ≤ 16 in flight
//!                                                               reader thread counts replies
//! ```
//!
//! How it works:
//!
//! - **Sizing**: when every `[[records]]` source is a file, their lines bound the records;
//!   each node's index (`CONFIG SET index-keys`) and the loader's key set are sized for
//!   them before pass 1, so neither grows step by step while pass 1 fills it.
//! - **Pass 1** streams every `[[records]]` section's source and sends one `RECORD SET key
//!   ATTR name value ...` per row (the node encodes it straight from the arguments). The
//!   loader keeps a 64-bit hash of every key it wrote (`KeySet`).
//! - A **barrier** waits for every reply, so all records exist before any link is written
//!   (a link gets its target's location hint from the node when it is written).
//! - **Pass 2** streams the sources again: one `RECORD SET key LINK field target ...` per row
//!   of a `[[records]]` section with foreign keys, and for each `[[lists]]` source the rows
//!   of one owner are gathered and its list is written whole (`Load::write_list`). A link
//!   whose target (or list owner) this load did not write is *dangling*: counted, reported,
//!   not written (`external = true` on a link skips the check for targets outside the load).
//! - **Chunks**: the first `chunk` targets of list `field` go into the owner record itself,
//!   the next ones into continuation items `owner#field#1`, `owner#field#2` …, each item
//!   pointing at the next by its link field `field.next` (KELI's "list" and "next" links).
//!   So `CHASE user:1 follows follows.next DEPTH d` walks the whole list. Each item is
//!   written once (`RECORD SET item LINKSPACKED field <t1 .. tn> LINK field.next next`), the
//!   last first, so each `next` link finds its target and gets a hint. A source not
//!   grouped by owner still loads: a later run of an owner appends (`LINK ADD`).
//! - **Generations** (`--alias`, `--every`): keys are written under the prefix
//!   `ALIAS@GEN:`; once both passes are acknowledged, `SET ALIAS ALIAS@GEN:` publishes the
//!   generation in one single-key write; after `--grace` the keys of every other generation
//!   are found by SCAN and deleted. A reader that reads ALIAS once and then only keys under
//!   that prefix sees one whole generation, never a mix.
//!
//! Bounds: sources are streamed (one row in memory, plus at most `chunk` targets of the
//! current list run); the key set and list counters are bounded by
//! `limits::LOAD_RECORDS_MAX`; each connection has at most `LOAD_BATCHES_INFLIGHT_MAX`
//! batches of `LOAD_BATCH_COMMANDS_MAX` commands unacknowledged.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use ringlet_codec::resp::{decode_reply, encode_request, reply::encode_bulk, reply::encode_len};
use ringlet_codec::resp::{scan_reply, Reply};
use ringlet_types::{key_slot, limits, SLOT_COUNT};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{BufRead, BufReader, IsTerminal, Read, Seek, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Targets per list item when the mapping does not say: the paper's choice ("we let each
/// list contain at most 100 followers").
const CHUNK_DEFAULT: usize = 100;

/// Longest JSON Lines line: one record's worth (a value may be up to VALUE_BYTES_MAX).
const JSONL_LINE_BYTES_MAX: u64 = limits::VALUE_BYTES_MAX as u64;

/// Rows fetched per `FETCH` from a PostgreSQL cursor: enough to amortise the round trip,
/// few enough that a batch of wide rows stays small.
const PG_FETCH_ROWS: u32 = 10_000;

/// Bytes of a batch after which it is flushed even below `LOAD_BATCH_COMMANDS_MAX` commands
/// (rows with large values).
const BATCH_BYTES_MAX: usize = 1 << 20;

/// Longest run of one owner's list rows kept to be written whole (`Load::write_list`):
/// 256 chunks of the longest list a field holds, ~1 M targets. A longer run is appended
/// chunk by chunk as it comes, as an unsorted source's runs are.
const LIST_RUN_TARGETS_MAX: usize = 256 * ringlet_record::LINKS_PER_FIELD_MAX;

/// Bytes of target keys of one run kept (long keys reach this before the count above).
const LIST_RUN_BYTES_MAX: usize = 64 << 20;

/// SCAN pages read per node when deleting old generations: COUNT 1,000 per page, so this
/// bounds the walk at ~10^9 buckets per node, far above any node's index.
const SCAN_PAGES_MAX: u64 = 1_000_000;

/// MOVED redirections followed by one control call (alias GET/SET).
const REDIRECTS_MAX: u32 = 5;

/// Longest wait for the next reply while replies are outstanding: a node that answers
/// nothing for this long is taken for hung and the load fails instead of waiting forever.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Args)]
pub struct LoadArgs {
    #[command(flatten)]
    conn: crate::Conn,
    /// The mapping (TOML): keys, attributes, links, link lists (docs/design/loader.md).
    #[arg(long)]
    mapping: PathBuf,
    /// A CSV file with a header row, `[NAME=]FILE` (NAME defaults to the file's stem).
    #[arg(long, value_name = "[NAME=]FILE")]
    csv: Vec<String>,
    /// A JSON Lines file (one object per line), `[NAME=]FILE`.
    #[arg(long, value_name = "[NAME=]FILE")]
    jsonl: Vec<String>,
    /// An SQLite database the `--query`s read.
    #[arg(long, conflicts_with = "postgres")]
    sqlite: Option<PathBuf>,
    /// A PostgreSQL connection string (`host=... user=... dbname=...` or a URL) the
    /// `--query`s read, all in one REPEATABLE READ transaction.
    #[arg(long)]
    postgres: Option<String>,
    /// A query of --sqlite or --postgres, `[NAME=]SQL` (NAME defaults to `query`, `query2` …).
    #[arg(long, value_name = "[NAME=]SQL")]
    query: Vec<String>,
    /// Load into a new generation under `ALIAS@GEN:` and publish it by `SET ALIAS ALIAS@GEN:`,
    /// then delete older generations (see --grace).
    #[arg(long)]
    alias: Option<String>,
    /// Reload every DURATION (`30s`, `10m`) into a new generation (needs --alias); runs until
    /// killed.
    #[arg(long, value_parser = humantime::parse_duration, requires = "alias")]
    every: Option<Duration>,
    /// With --every: stop after this many generations (default: run until killed).
    #[arg(long, requires = "every")]
    count: Option<u64>,
    /// After publishing a generation, wait this long before deleting the older ones, so that
    /// readers that read the alias just before the swap finish on the old keys.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// Connections per node (keys are spread over them by hash, so each key's commands stay
    /// in order on one connection).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    connections: u16,
    /// Do not ask the nodes to pre-size their index, before pass 1 or before pass 2 (`CONFIG
    /// SET index-keys`): location hints taken before the index grows then lose their
    /// index-entry part, and pass 1 grows the index step by step.
    #[arg(long = "no-index-reserve")]
    no_index_reserve: bool,
}

// ---------------------------------------------------------------------------------------------
// Mapping

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Mapping {
    #[serde(default)]
    records: Vec<RecordSpec>,
    #[serde(default)]
    lists: Vec<ListSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordSpec {
    source: Option<String>,
    key: String,
    #[serde(default)]
    attributes: Vec<String>,
    #[serde(default)]
    links: Vec<LinkSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkSpec {
    field: String,
    target: String,
    #[serde(default)]
    external: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListSpec {
    source: Option<String>,
    key: String,
    field: String,
    target: String,
    #[serde(default = "chunk_default")]
    chunk: usize,
    #[serde(default)]
    external: bool,
}

fn chunk_default() -> usize {
    CHUNK_DEFAULT
}

/// A key template: literal bytes and `{column}` references (`{{` and `}}` are literal braces,
/// so `{{{id}}}` renders a hash tag around the id).
#[derive(Debug, PartialEq)]
enum Part {
    Lit(Vec<u8>),
    Col(usize),
}

#[derive(Debug, PartialEq)]
struct Template(Vec<Part>);

impl Template {
    /// Parse `s`, adding the columns it names to `cols` (each once).
    fn parse(s: &str, cols: &mut Vec<String>) -> Result<Template> {
        let mut parts = Vec::new();
        let mut lit = Vec::new();
        let mut it = s.char_indices().peekable();
        while let Some((i, c)) = it.next() {
            match c {
                '{' if it.peek().map(|p| p.1) == Some('{') => {
                    it.next();
                    lit.push(b'{');
                }
                '}' if it.peek().map(|p| p.1) == Some('}') => {
                    it.next();
                    lit.push(b'}');
                }
                '{' => {
                    let rest = &s[i + 1..];
                    let end = rest
                        .find('}')
                        .ok_or_else(|| anyhow!("template {s:?}: unclosed '{{'"))?;
                    let name = &rest[..end];
                    if name.is_empty() {
                        bail!("template {s:?}: empty column name");
                    }
                    if !lit.is_empty() {
                        parts.push(Part::Lit(std::mem::take(&mut lit)));
                    }
                    parts.push(Part::Col(col_index(cols, name)));
                    for _ in 0..name.chars().count() + 1 {
                        it.next();
                    }
                }
                '}' => bail!("template {s:?}: '}}' without '{{' (write '}}}}' for a brace)"),
                c => {
                    let mut b = [0u8; 4];
                    lit.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
                }
            }
        }
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        if !parts.iter().any(|p| matches!(p, Part::Col(_))) {
            bail!("template {s:?} names no column: every row would get the same key");
        }
        Ok(Template(parts))
    }

    /// `prefix` + the template over `row` into `out`; false when a column is null or empty
    /// (no key: the row or link is skipped).
    fn render(&self, row: &Row, prefix: &[u8], out: &mut Vec<u8>) -> bool {
        out.clear();
        out.extend_from_slice(prefix);
        for p in &self.0 {
            match p {
                Part::Lit(l) => out.extend_from_slice(l),
                Part::Col(i) => match row.get(*i) {
                    Some(v) if !v.is_empty() => out.extend_from_slice(v),
                    _ => return false,
                },
            }
        }
        true
    }
}

fn col_index(cols: &mut Vec<String>, name: &str) -> usize {
    if let Some(i) = cols.iter().position(|c| c == name) {
        return i;
    }
    cols.push(name.to_string());
    cols.len() - 1
}

struct Link {
    field: Vec<u8>,
    target: Template,
    external: bool,
}

/// A `[[records]]` section, compiled: `cols` are the source columns it reads, in the order
/// its templates and attributes index them.
struct Records {
    source: usize,
    cols: Vec<String>,
    key: Template,
    attrs: Vec<(Vec<u8>, usize)>,
    links: Vec<Link>,
}

struct List {
    source: usize,
    cols: Vec<String>,
    key: Template,
    field: Vec<u8>,
    next_field: Vec<u8>,
    target: Template,
    chunk: usize,
    external: bool,
}

struct Compiled {
    records: Vec<Records>,
    lists: Vec<List>,
}

fn compile(m: Mapping, sources: &[SourceSpec]) -> Result<Compiled> {
    if m.records.is_empty() && m.lists.is_empty() {
        bail!("the mapping has no [[records]] and no [[lists]] section");
    }
    let find = |name: &Option<String>, what: &str| -> Result<usize> {
        let names: Vec<&str> = sources.iter().map(|s| s.name.as_str()).collect();
        match name {
            Some(n) => names
                .iter()
                .position(|x| x == n)
                .ok_or_else(|| anyhow!("{what}: no source named {n:?} (sources: {names:?})")),
            None if sources.len() == 1 => Ok(0),
            None => bail!("{what}: say `source = NAME`, there are several sources: {names:?}"),
        }
    };
    let mut records = Vec::new();
    for r in m.records {
        let what = format!("[[records]] key = {:?}", r.key);
        let source = find(&r.source, &what)?;
        let mut cols = Vec::new();
        let key = Template::parse(&r.key, &mut cols)?;
        let mut seen = HashSet::new();
        let attrs = r
            .attributes
            .iter()
            .map(|a| {
                if !seen.insert(a.clone()) {
                    bail!("{what}: attribute {a:?} twice");
                }
                Ok((a.as_bytes().to_vec(), col_index(&mut cols, a)))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut links = Vec::new();
        for l in r.links {
            if !seen.insert(l.field.clone()) {
                bail!(
                    "{what}: field {:?} is both an attribute and a link, or two links",
                    l.field
                );
            }
            links.push(Link {
                field: l.field.into_bytes(),
                target: Template::parse(&l.target, &mut cols)?,
                external: l.external,
            });
        }
        records.push(Records {
            source,
            cols,
            key,
            attrs,
            links,
        });
    }
    let mut lists = Vec::new();
    for l in m.lists {
        let what = format!("[[lists]] key = {:?} field = {:?}", l.key, l.field);
        let source = find(&l.source, &what)?;
        if l.chunk == 0 || l.chunk > ringlet_record::LINKS_PER_FIELD_MAX {
            bail!(
                "{what}: chunk must be 1..={} (a link list's longest)",
                ringlet_record::LINKS_PER_FIELD_MAX
            );
        }
        if l.field.is_empty() {
            bail!("{what}: empty field");
        }
        let mut cols = Vec::new();
        let key = Template::parse(&l.key, &mut cols)?;
        let target = Template::parse(&l.target, &mut cols)?;
        lists.push(List {
            source,
            cols,
            key,
            next_field: format!("{}.next", l.field).into_bytes(),
            field: l.field.into_bytes(),
            target,
            chunk: l.chunk,
            external: l.external,
        });
    }
    Ok(Compiled { records, lists })
}

// ---------------------------------------------------------------------------------------------
// Sources

/// One row: the values of a section's columns (`None`: SQL NULL, JSON null or missing, or an
/// empty CSV field). Buffers are reused from row to row.
#[derive(Default)]
struct Row {
    vals: Vec<Vec<u8>>,
    present: Vec<bool>,
}

impl Row {
    fn reset(&mut self, n: usize) {
        self.vals.resize_with(n, Vec::new);
        self.present.clear();
        self.present.resize(n, false);
    }

    fn set(&mut self, i: usize, v: &[u8]) {
        self.vals[i].clear();
        self.vals[i].extend_from_slice(v);
        self.present[i] = true;
    }

    fn get(&self, i: usize) -> Option<&[u8]> {
        self.present
            .get(i)
            .copied()
            .unwrap_or(false)
            .then(|| self.vals[i].as_slice())
    }
}

enum SourceKind {
    Csv(PathBuf),
    Jsonl(PathBuf),
    Query(String),
}

struct SourceSpec {
    name: String,
    kind: SourceKind,
}

/// `NAME=rest` when NAME looks like a name, else `(None, s)`.
fn split_name(s: &str) -> (Option<&str>, &str) {
    if let Some((n, rest)) = s.split_once('=') {
        let ok = !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
        if ok {
            return (Some(n), rest);
        }
    }
    (None, s)
}

fn source_specs(a: &LoadArgs) -> Result<Vec<SourceSpec>> {
    let mut out = Vec::new();
    let file = |s: &str, csv: bool| {
        let (n, p) = split_name(s);
        let path = PathBuf::from(p);
        let name = n.map(str::to_string).unwrap_or_else(|| {
            path.file_stem()
                .map(|x| x.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        let kind = if csv {
            SourceKind::Csv(path)
        } else {
            SourceKind::Jsonl(path)
        };
        SourceSpec { name, kind }
    };
    out.extend(a.csv.iter().map(|s| file(s, true)));
    out.extend(a.jsonl.iter().map(|s| file(s, false)));
    if !a.query.is_empty() && a.sqlite.is_none() && a.postgres.is_none() {
        bail!("--query needs --sqlite FILE or --postgres URL");
    }
    if a.query.is_empty() && (a.sqlite.is_some() || a.postgres.is_some()) {
        bail!("--sqlite/--postgres need at least one --query [NAME=]SQL");
    }
    for (i, q) in a.query.iter().enumerate() {
        let (n, sql) = split_name(q);
        // "SELECT ... WHERE a=b" has a space before '=', so it is never taken for a name.
        let name = n.map_or_else(
            || {
                if i == 0 {
                    "query".to_string()
                } else {
                    format!("query{}", i + 1)
                }
            },
            str::to_string,
        );
        out.push(SourceSpec {
            name,
            kind: SourceKind::Query(sql.to_string()),
        });
    }
    if out.is_empty() {
        bail!("no source: give --csv, --jsonl, or --sqlite/--postgres with --query");
    }
    let mut names = HashSet::new();
    for s in &out {
        if !names.insert(s.name.as_str()) {
            bail!("two sources named {:?}: name them with NAME=...", s.name);
        }
    }
    Ok(out)
}

enum Db {
    Sqlite(rusqlite::Connection),
    Postgres(Box<postgres::Client>),
}

/// The sources of one load, opened so that both passes read the same data: files are opened
/// once and rewound (a file replaced by rename between the passes is not seen), queries run
/// in one read transaction (SQLite: one snapshot; PostgreSQL: REPEATABLE READ).
struct Snapshot<'a> {
    specs: &'a [SourceSpec],
    files: Vec<Option<File>>,
    db: Option<Db>,
}

impl<'a> Snapshot<'a> {
    fn open(a: &LoadArgs, specs: &'a [SourceSpec]) -> Result<Snapshot<'a>> {
        let files = specs
            .iter()
            .map(|s| match &s.kind {
                SourceKind::Csv(p) | SourceKind::Jsonl(p) => File::open(p)
                    .with_context(|| format!("cannot open {}", p.display()))
                    .map(Some),
                SourceKind::Query(_) => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        let db = if let Some(p) = &a.sqlite {
            let c = rusqlite::Connection::open_with_flags(
                p,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .with_context(|| format!("cannot open SQLite database {}", p.display()))?;
            c.execute_batch("BEGIN")?;
            Some(Db::Sqlite(c))
        } else if let Some(url) = &a.postgres {
            let mut c = postgres::Client::connect(url, postgres::NoTls)
                .context("cannot connect to PostgreSQL")?;
            c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")?;
            Some(Db::Postgres(Box::new(c)))
        } else {
            None
        };
        Ok(Snapshot { specs, files, db })
    }

    /// At most how many rows source `src` has, if that is cheap to know: a file's lines
    /// (a CSV header, a blank line or a quoted newline only make it larger), one read of the
    /// file at memory speed; `None` for a query (counting it would run it once more).
    fn rows_bound(&mut self, src: usize) -> Result<Option<u64>> {
        let Some(mut file) = self.files[src].as_ref() else {
            return Ok(None);
        };
        file.rewind()?;
        let mut buf = vec![0u8; 1 << 20];
        let mut lines = 0u64;
        let mut last = b'\n';
        // Bounded by the file's length (each read advances or ends the loop).
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
            last = buf[n - 1];
        }
        file.rewind()?;
        // A last line without its newline is a row too.
        Ok(Some(lines + u64::from(last != b'\n')))
    }

    fn close(self) -> Result<()> {
        match self.db {
            Some(Db::Sqlite(c)) => c.execute_batch("COMMIT")?,
            Some(Db::Postgres(mut c)) => c.batch_execute("COMMIT")?,
            None => {}
        }
        Ok(())
    }

    /// Call `f` on every row of source `src`, with `cols` (by name) in `Row` order.
    /// Returns the rows read.
    fn scan(
        &mut self,
        src: usize,
        cols: &[String],
        f: &mut dyn FnMut(&Row) -> Result<()>,
    ) -> Result<u64> {
        let spec = &self.specs[src];
        let mut row = Row::default();
        let mut n = 0u64;
        let what = || format!("source {:?}", spec.name);
        match &spec.kind {
            SourceKind::Csv(_) => {
                let mut file = self.files[src].as_ref().expect("opened");
                file.rewind()?;
                let mut rd = csv::ReaderBuilder::new()
                    .has_headers(true)
                    .from_reader(BufReader::with_capacity(1 << 20, file));
                let header = rd.byte_headers().with_context(what)?.clone();
                let idx = cols
                    .iter()
                    .map(|c| {
                        header
                            .iter()
                            .position(|h| h == c.as_bytes())
                            .ok_or_else(|| anyhow!("{}: no column {c:?} in the CSV header", what()))
                    })
                    .collect::<Result<Vec<_>>>()?;
                let mut rec = csv::ByteRecord::new();
                while rd.read_byte_record(&mut rec).with_context(what)? {
                    row.reset(cols.len());
                    for (i, &j) in idx.iter().enumerate() {
                        match rec.get(j) {
                            Some(v) if !v.is_empty() => row.set(i, v),
                            _ => {}
                        }
                    }
                    f(&row)?;
                    n += 1;
                }
            }
            SourceKind::Jsonl(_) => {
                let mut file = self.files[src].as_ref().expect("opened");
                file.rewind()?;
                let mut rd = BufReader::with_capacity(1 << 20, file);
                let mut line = Vec::new();
                let mut lineno = 0u64;
                loop {
                    line.clear();
                    let got = (&mut rd)
                        .take(JSONL_LINE_BYTES_MAX + 1)
                        .read_until(b'\n', &mut line)?;
                    if got == 0 {
                        break;
                    }
                    lineno += 1;
                    if line.len() as u64 > JSONL_LINE_BYTES_MAX {
                        bail!(
                            "{} line {lineno}: longer than {JSONL_LINE_BYTES_MAX} bytes",
                            what()
                        );
                    }
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    let obj: serde_json::Map<String, serde_json::Value> =
                        serde_json::from_slice(&line)
                            .with_context(|| format!("{} line {lineno}", what()))?;
                    row.reset(cols.len());
                    for (i, c) in cols.iter().enumerate() {
                        match obj.get(c) {
                            None | Some(serde_json::Value::Null) => {}
                            Some(serde_json::Value::String(s)) => row.set(i, s.as_bytes()),
                            Some(v) => row.set(i, v.to_string().as_bytes()),
                        }
                    }
                    f(&row)?;
                    n += 1;
                }
            }
            SourceKind::Query(sql) => match self.db.as_mut().expect("a db with queries") {
                Db::Sqlite(c) => {
                    let mut st = c.prepare(sql).with_context(what)?;
                    let names: Vec<String> =
                        st.column_names().iter().map(|s| s.to_string()).collect();
                    let idx = column_indexes(&names, cols, &what())?;
                    let mut rows = st.query([])?;
                    let mut num = itoa::Buffer::new();
                    while let Some(r) = rows.next()? {
                        row.reset(cols.len());
                        for (i, &j) in idx.iter().enumerate() {
                            use rusqlite::types::ValueRef;
                            match r.get_ref(j)? {
                                ValueRef::Null => {}
                                ValueRef::Integer(v) => row.set(i, num.format(v).as_bytes()),
                                ValueRef::Real(v) => row.set(i, v.to_string().as_bytes()),
                                ValueRef::Text(v) | ValueRef::Blob(v) => row.set(i, v),
                            }
                        }
                        f(&row)?;
                        n += 1;
                    }
                }
                Db::Postgres(c) => {
                    // A cursor streams the result in FETCH-sized batches; the simple query
                    // protocol gives every column as text whatever its type.
                    c.batch_execute(&format!("DECLARE ringlet_load NO SCROLL CURSOR FOR {sql}"))
                        .with_context(what)?;
                    let mut idx: Option<Vec<usize>> = None;
                    loop {
                        let msgs =
                            c.simple_query(&format!("FETCH {PG_FETCH_ROWS} FROM ringlet_load"))?;
                        let mut got = 0;
                        for m in &msgs {
                            let postgres::SimpleQueryMessage::Row(r) = m else {
                                continue;
                            };
                            got += 1;
                            if idx.is_none() {
                                let names: Vec<String> =
                                    r.columns().iter().map(|c| c.name().to_string()).collect();
                                idx = Some(column_indexes(&names, cols, &what())?);
                            }
                            row.reset(cols.len());
                            for (i, &j) in idx.as_ref().expect("set above").iter().enumerate() {
                                if let Some(v) = r.get(j) {
                                    row.set(i, v.as_bytes());
                                }
                            }
                            f(&row)?;
                            n += 1;
                        }
                        if got == 0 {
                            break;
                        }
                    }
                    c.batch_execute("CLOSE ringlet_load")?;
                }
            },
        }
        Ok(n)
    }
}

fn column_indexes(names: &[String], cols: &[String], what: &str) -> Result<Vec<usize>> {
    cols.iter()
        .map(|c| {
            names
                .iter()
                .position(|n| n == c)
                .ok_or_else(|| anyhow!("{what}: the query has no column {c:?} (it has {names:?})"))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Writing: pipelined connections routed by slot

/// What a reader thread is told: how many replies the next batch brings, or to say when it
/// has read all before (a barrier).
enum Msg {
    Replies(u32),
    Sync(SyncSender<()>),
}

/// Error replies of one connection: how many, and the first few texts.
#[derive(Default)]
struct Errors {
    count: u64,
    first: Vec<String>,
}

/// One pipelined RESP connection. Commands are encoded into `buf`; a full batch is announced
/// to the reader thread (bounded channel: back-pressure once
/// `LOAD_BATCHES_INFLIGHT_MAX` batches are unacknowledged) and then written.
struct Pipe {
    addr: String,
    sock: TcpStream,
    buf: Vec<u8>,
    cmds: u32,
    tx: Option<SyncSender<Msg>>,
    reader: Option<JoinHandle<Result<()>>>,
    errors: Arc<Mutex<Errors>>,
    /// Arguments the command begun last still owes its `*argc` header: a command sent with
    /// fewer would make the node wait for the rest and the load hang, so `end` fails loudly
    /// instead (a bug in this file, never an input's fault).
    args_owed: usize,
}

impl Pipe {
    fn connect(addr: &str, password: Option<&str>) -> Result<Pipe> {
        let mut sock = connect(addr, password)?;
        sock.set_read_timeout(Some(REPLY_TIMEOUT))?;
        let rsock = sock.try_clone()?;
        let (tx, rx) = sync_channel(limits::LOAD_BATCHES_INFLIGHT_MAX as usize);
        let errors = Arc::new(Mutex::new(Errors::default()));
        let e2 = errors.clone();
        let reader = std::thread::Builder::new()
            .name("load-replies".into())
            .spawn(move || read_replies(rsock, rx, e2))?;
        sock.flush()?;
        Ok(Pipe {
            addr: addr.to_string(),
            sock,
            buf: Vec::with_capacity(BATCH_BYTES_MAX + 64 * 1024),
            cmds: 0,
            tx: Some(tx),
            reader: Some(reader),
            errors,
            args_owed: 0,
        })
    }

    fn begin(&mut self, argc: usize) -> &mut Self {
        encode_len(&mut self.buf, b'*', argc);
        self.args_owed = argc;
        self
    }

    fn arg(&mut self, a: &[u8]) -> &mut Self {
        encode_bulk(&mut self.buf, a);
        self.args_owed = self.args_owed.wrapping_sub(1);
        self
    }

    fn end(&mut self) -> Result<()> {
        if self.args_owed != 0 {
            bail!("internal error: a command's argument count does not match its header");
        }
        self.cmds += 1;
        if self.cmds >= limits::LOAD_BATCH_COMMANDS_MAX || self.buf.len() >= BATCH_BYTES_MAX {
            self.flush()?;
        }
        Ok(())
    }

    fn send(&mut self, m: Msg) -> Result<()> {
        let ok = self.tx.as_ref().is_some_and(|tx| tx.send(m).is_ok());
        if !ok {
            return Err(self.reader_failure());
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.cmds == 0 {
            return Ok(());
        }
        self.send(Msg::Replies(self.cmds))?;
        if let Err(e) = self.sock.write_all(&self.buf) {
            return Err(anyhow!("write to {}: {e}", self.addr));
        }
        self.buf.clear();
        self.cmds = 0;
        Ok(())
    }

    /// Flush and ask the reader to signal once every reply before is in.
    fn sync_start(&mut self) -> Result<Receiver<()>> {
        self.flush()?;
        let (tx, rx) = sync_channel(1);
        self.send(Msg::Sync(tx))?;
        Ok(rx)
    }

    fn reader_failure(&mut self) -> anyhow::Error {
        self.tx = None;
        match self.reader.take().map(JoinHandle::join) {
            Some(Ok(Err(e))) => e.context(format!("connection to {}", self.addr)),
            Some(Err(_)) => anyhow!("the reply reader of {} panicked", self.addr),
            _ => anyhow!("connection to {} closed", self.addr),
        }
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        self.tx = None;
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// The reader thread of a `Pipe`: reads exactly the replies announced, counts error replies.
fn read_replies(mut sock: TcpStream, rx: Receiver<Msg>, errors: Arc<Mutex<Errors>>) -> Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut start = 0usize;
    let mut chunk = vec![0u8; 256 * 1024];
    while let Ok(m) = rx.recv() {
        let mut want = match m {
            Msg::Replies(n) => n,
            Msg::Sync(tx) => {
                let _ = tx.send(());
                continue;
            }
        };
        while want > 0 {
            match scan_reply(&buf[start..]).map_err(|e| anyhow!("bad reply: {e:?}"))? {
                Some((info, len)) => {
                    if info.is_error {
                        let mut e = errors.lock().unwrap_or_else(|p| p.into_inner());
                        e.count += 1;
                        if e.first.len() < 5 {
                            if let Ok(Some((Reply::Error(t), _))) = decode_reply(&buf[start..]) {
                                e.first.push(String::from_utf8_lossy(&t).into_owned());
                            }
                        }
                    }
                    start += len;
                    want -= 1;
                }
                None => {
                    if start > 0 {
                        buf.drain(..start);
                        start = 0;
                    }
                    let n = sock.read(&mut chunk).with_context(|| {
                        format!("waiting for {want} replies (up to {REPLY_TIMEOUT:?} each)")
                    })?;
                    if n == 0 {
                        bail!("connection closed with {want} replies outstanding");
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
            }
        }
    }
    Ok(())
}

fn connect(addr: &str, password: Option<&str>) -> Result<TcpStream> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("cannot connect to {addr}"))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    if let Some(pw) = password {
        match call(&mut s, &[b"AUTH", pw.as_bytes()])? {
            Reply::Simple(_) => {}
            r => bail!("AUTH at {addr}: {}", show(&r)),
        }
    }
    Ok(s)
}

/// One request, one reply (control calls: CLUSTER SLOTS, GET/SET of the alias, SCAN).
fn call(s: &mut TcpStream, args: &[&[u8]]) -> Result<Reply> {
    let mut out = Vec::new();
    encode_request(&mut out, args);
    s.write_all(&out)?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some((r, _)) = decode_reply(&buf).map_err(|e| anyhow!("bad reply: {e:?}"))? {
            return Ok(r);
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            bail!("connection closed");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn show(r: &Reply) -> String {
    match r {
        Reply::Error(e) | Reply::Bulk(e) | Reply::Simple(e) => String::from_utf8_lossy(e).into(),
        r => format!("{r:?}"),
    }
}

/// The nodes to write to: one, or a cluster's slot owners from CLUSTER SLOTS.
struct Topology {
    nodes: Vec<String>,
    /// `slot_node[slot]`: index in `nodes` (cluster mode).
    slot_node: Option<Vec<u16>>,
}

fn topology(host: &str, port: u16, password: Option<&str>) -> Result<Topology> {
    let seed = format!("{host}:{port}");
    let mut s = connect(&seed, password)?;
    let r = call(&mut s, &[b"CLUSTER", b"SLOTS"])?;
    let Reply::Array(ranges) = r else {
        // A single node answers CLUSTER with an error.
        return Ok(Topology {
            nodes: vec![seed],
            slot_node: None,
        });
    };
    let mut nodes: Vec<String> = Vec::new();
    let mut slot_node = vec![u16::MAX; usize::from(SLOT_COUNT)];
    for range in ranges {
        let Reply::Array(v) = range else {
            bail!("CLUSTER SLOTS: a range is not an array");
        };
        let (Some(Reply::Integer(first)), Some(Reply::Integer(last)), Some(Reply::Array(m))) =
            (v.first(), v.get(1), v.get(2))
        else {
            bail!("CLUSTER SLOTS: unexpected range {v:?}");
        };
        let ip = match m.first() {
            Some(Reply::Bulk(ip)) if !ip.is_empty() => String::from_utf8_lossy(ip).into_owned(),
            _ => host.to_string(),
        };
        let Some(Reply::Integer(p)) = m.get(1) else {
            bail!("CLUSTER SLOTS: no port in {m:?}");
        };
        let addr = format!("{ip}:{p}");
        let i = match nodes.iter().position(|n| *n == addr) {
            Some(i) => i,
            None => {
                nodes.push(addr);
                nodes.len() - 1
            }
        };
        let (first, last) = (*first, *last);
        if !(0..i64::from(SLOT_COUNT)).contains(&first)
            || !(first..i64::from(SLOT_COUNT)).contains(&last)
        {
            bail!("CLUSTER SLOTS: bad range {first}..{last}");
        }
        for s in first..=last {
            slot_node[s as usize] = i as u16;
        }
    }
    if nodes.is_empty() || slot_node.contains(&u16::MAX) {
        bail!("the cluster does not cover every slot yet (CLUSTER SLOTS); retry once it is up");
    }
    Ok(Topology {
        nodes,
        slot_node: Some(slot_node),
    })
}

/// All connections of a load, keyed by node and, within a node, by key hash.
struct Writer {
    topo: Topology,
    per_node: usize,
    pipes: Vec<Pipe>,
}

impl Writer {
    fn open(topo: Topology, per_node: usize, password: Option<&str>) -> Result<Writer> {
        let mut pipes = Vec::new();
        for n in &topo.nodes {
            for _ in 0..per_node {
                pipes.push(Pipe::connect(n, password)?);
            }
        }
        Ok(Writer {
            topo,
            per_node,
            pipes,
        })
    }

    /// The pipe of `key`: its slot's node, and a fixed connection of that node, so commands
    /// on one key keep their order.
    fn pipe(&mut self, key: &[u8], argc: usize) -> &mut Pipe {
        let node = self
            .topo
            .slot_node
            .as_ref()
            .map_or(0, |t| usize::from(t[usize::from(key_slot(key))]));
        let sub = if self.per_node > 1 {
            (hash_key(key) % self.per_node as u64) as usize
        } else {
            0
        };
        self.pipes[node * self.per_node + sub].begin(argc)
    }

    /// Wait until every command sent so far is answered; fail with the error replies if any.
    fn barrier(&mut self) -> Result<()> {
        let waits = self
            .pipes
            .iter_mut()
            .map(Pipe::sync_start)
            .collect::<Result<Vec<_>>>()?;
        for (i, w) in waits.into_iter().enumerate() {
            if w.recv().is_err() {
                return Err(self.pipes[i].reader_failure());
            }
        }
        let mut count = 0;
        let mut first = Vec::new();
        for p in &self.pipes {
            let e = p.errors.lock().unwrap_or_else(|e| e.into_inner());
            count += e.count;
            first.extend(e.first.iter().cloned());
        }
        if count > 0 {
            first.truncate(5);
            bail!("{count} commands failed; first: {}", first.join(" | "));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The two passes

/// 64-bit foldhash (its `quality` variant, fixed seed): the same on every run. Was SipHash-1-3
/// (std's `DefaultHasher`), ~4 % of the loader's samples on KELI's graph, where every
/// list row hashes its owner and its target (docs/design/loader.md, "Loader CPU (session
/// 17)"). The key set only needs a well-mixed 64-bit value of trusted input (a collision
/// lets one dangling link through, ~n²/2⁶⁵), not SipHash's resistance to chosen keys.
fn hash_key(key: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    const KEY_HASH: foldhash::quality::FixedState =
        foldhash::quality::FixedState::with_seed(0x5249_4e47_4c45_5421);
    KEY_HASH.hash_one(key)
}

/// A hasher for keys that are already hashes.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only u64 keys")
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type HashedMap = HashMap<u64, u32, BuildHasherDefault<Prehashed>>;

/// The 64-bit hashes of the keys this load wrote, for pass 2's dangling-link check: an
/// open-addressing table (linear probing, at most half full, 8 bytes a slot) rather than a
/// `HashSet`, so that pass 2 can request the slots of a chunk's targets before it checks
/// them. The set outgrows the caches (a few MB at 200,000 keys) and a link's target is a
/// random key: checked one by one, each link was a cache miss in series, half the loader's
/// CPU on KELI's graph (BENCHMARKS.md, "Loader and reader chase").
struct KeySet {
    /// 0 = empty; a hash of 0 is stored as 1 (one more collision class, ~2^-64).
    slots: Vec<u64>,
    len: usize,
}

/// Most slots [`KeySet::reserve`] allocates ahead of the keys (128 MiB, 8 M keys).
const KEYSET_RESERVE_SLOTS_MAX: usize = 1 << 24;

impl KeySet {
    fn new() -> KeySet {
        KeySet {
            slots: vec![0; 1024],
            len: 0,
        }
    }

    /// Room for `n` keys without doubling (an empty set only: pass 1's first rows), when
    /// their number is known to be at most `n` before pass 1 (`Snapshot::rows_bound`).
    fn reserve(&mut self, n: u64) {
        // A bound of lines, not of records: a source whose rows are mostly skipped would
        // reserve for keys that never come, so the reserve stops at KEYSET_RESERVE_SLOTS_MAX
        // and a larger set grows by doubling as before.
        let slots = (n.min(limits::LOAD_RECORDS_MAX) as usize)
            .saturating_mul(2)
            .next_power_of_two()
            .min(KEYSET_RESERVE_SLOTS_MAX);
        if self.len == 0 && slots > self.slots.len() {
            // Zeroed by the allocator's fresh pages: touched only as keys land.
            self.slots = vec![0; slots];
        }
    }

    fn fix(h: u64) -> u64 {
        h.max(1)
    }

    fn home(&self, h: u64) -> usize {
        // foldhash's (quality) low bits are as well mixed as any; the table size is a power
        // of two.
        (h as usize) & (self.slots.len() - 1)
    }

    fn len(&self) -> usize {
        self.len
    }

    fn insert(&mut self, h: u64) {
        if (self.len + 1) * 2 > self.slots.len() {
            let doubled = vec![0; self.slots.len() * 2];
            let old = std::mem::replace(&mut self.slots, doubled);
            self.len = 0;
            for h in old.into_iter().filter(|&h| h != 0) {
                self.insert(h);
            }
        }
        let h = Self::fix(h);
        let mask = self.slots.len() - 1;
        let mut i = self.home(h);
        // Bounded: the table is at most half full, so an empty slot comes within its size.
        for _ in 0..self.slots.len() {
            match self.slots[i] {
                0 => {
                    self.slots[i] = h;
                    self.len += 1;
                    return;
                }
                x if x == h => return,
                _ => i = (i + 1) & mask,
            }
        }
        unreachable!("a half-full table has an empty slot");
    }

    fn contains(&self, h: u64) -> bool {
        let h = Self::fix(h);
        let mask = self.slots.len() - 1;
        let mut i = self.home(h);
        for _ in 0..self.slots.len() {
            match self.slots[i] {
                0 => return false,
                x if x == h => return true,
                _ => i = (i + 1) & mask,
            }
        }
        false
    }

    /// Start loading `h`'s home slot (a hint: no effect on any answer).
    fn prefetch(&self, h: u64) {
        let p = self.slots.as_ptr().wrapping_add(self.home(Self::fix(h)));
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch never faults and reads nothing the program observes; the
        // address is inside the table anyway.
        unsafe {
            core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0)
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = p;
    }
}

#[derive(Default, Debug)]
struct Stats {
    records: u64,
    links: u64,
    dangling: u64,
    skipped: u64,
    first_skip: Option<String>,
}

/// One load: pass 1, barrier, pass 2, barrier.
struct Load<'m> {
    map: &'m Compiled,
    /// `ALIAS@GEN:` for a generation, empty otherwise.
    prefix: Vec<u8>,
    fresh: bool,
    w: Writer,
    keys: KeySet,
    counts: HashedMap,
    stats: Stats,
    bar: ProgressBar,
}

fn bar(label: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new_spinner();
    b.set_style(
        ProgressStyle::with_template("{spinner} {prefix}: {human_pos} rows, {per_sec}, {elapsed}")
            .expect("a valid template"),
    );
    b.set_prefix(label.to_string());
    b.enable_steady_tick(Duration::from_millis(200));
    b
}

impl Load<'_> {
    fn skip(&mut self, why: impl FnOnce() -> String) {
        self.stats.skipped += 1;
        if self.stats.first_skip.is_none() {
            self.stats.first_skip = Some(why());
        }
    }

    fn tick(&self, rows: u64) {
        if rows.is_multiple_of(1024) {
            self.bar.inc(1024);
        }
    }

    fn pass1(&mut self, snap: &mut Snapshot) -> Result<()> {
        let map = self.map;
        let mut key = Vec::new();
        for r in &map.records {
            let mut rows = 0u64;
            snap.scan(r.source, &r.cols, &mut |row| {
                rows += 1;
                self.tick(rows);
                if !r.key.render(row, &self.prefix, &mut key) {
                    self.skip(|| format!("a row of [[records]] has no key (row {rows})"));
                    return Ok(());
                }
                let n = r
                    .attrs
                    .iter()
                    .filter(|(_, c)| row.get(*c).is_some())
                    .count();
                if n > 0 {
                    // `RECORD SET key ATTR name value ...` rather than HSET: the node encodes
                    // the record straight from the arguments (no `Record` built per row).
                    let p = self.w.pipe(&key, 3 + 3 * n);
                    p.arg(b"RECORD").arg(b"SET").arg(&key);
                    for (name, c) in &r.attrs {
                        if let Some(v) = row.get(*c) {
                            p.arg(b"ATTR").arg(name).arg(v);
                        }
                    }
                    p.end()?;
                }
                self.keys.insert(hash_key(&key));
                self.stats.records += 1;
                if self.keys.len() as u64 > limits::LOAD_RECORDS_MAX {
                    bail!(
                        "more than {} records: split the load (limits::LOAD_RECORDS_MAX)",
                        limits::LOAD_RECORDS_MAX
                    );
                }
                Ok(())
            })?;
        }
        self.w.barrier()
    }

    fn exists(&self, key: &[u8]) -> bool {
        self.keys.contains(hash_key(key))
    }

    fn pass2(&mut self, snap: &mut Snapshot) -> Result<()> {
        let map = self.map;
        let (mut key, mut target) = (Vec::new(), Vec::new());
        let (mut links, mut fields) = (ListRun::default(), Vec::new());
        for r in map.records.iter().filter(|r| !r.links.is_empty()) {
            let mut rows = 0u64;
            snap.scan(r.source, &r.cols, &mut |row| {
                rows += 1;
                self.tick(rows);
                if !r.key.render(row, &self.prefix, &mut key) {
                    return Ok(()); // counted in pass 1
                }
                // All of the row's links in one write (`RECORD SET key LINK f t ...`), not
                // one `LINK SET` (one rewrite of the record) per foreign key.
                links.clear();
                fields.clear();
                for (i, l) in r.links.iter().enumerate() {
                    let prefix: &[u8] = if l.external { b"" } else { &self.prefix };
                    if !l.target.render(row, prefix, &mut target) {
                        continue; // a null foreign key: no link
                    }
                    if !l.external && !self.exists(&target) {
                        self.stats.dangling += 1;
                        continue;
                    }
                    links.push(&target);
                    fields.push(i);
                }
                if !fields.is_empty() {
                    let p = self.w.pipe(&key, 3 + 3 * fields.len());
                    p.arg(b"RECORD").arg(b"SET").arg(&key);
                    for (j, &i) in fields.iter().enumerate() {
                        p.arg(b"LINK").arg(&r.links[i].field).arg(links.target(j));
                    }
                    p.end()?;
                    self.stats.links += fields.len() as u64;
                }
                Ok(())
            })?;
        }
        for l in &map.lists {
            let mut run = ListRun::default();
            let mut rows = 0u64;
            let (mut checked_owner, mut owner_ok) = (Vec::new(), false);
            snap.scan(l.source, &l.cols, &mut |row| {
                rows += 1;
                self.tick(rows);
                let prefix: &[u8] = if l.external { b"" } else { &self.prefix };
                if !l.key.render(row, &self.prefix, &mut key)
                    || !l.target.render(row, prefix, &mut target)
                {
                    self.skip(|| format!("a row of [[lists]] has no owner or target (row {rows})"));
                    return Ok(());
                }
                // The owner is checked once per run of rows with the same owner (a sorted
                // source repeats it; each row used to hash and look it up again); the target
                // when its run is flushed, with the others of its chunk.
                if checked_owner != key {
                    checked_owner.clear();
                    checked_owner.extend_from_slice(&key);
                    owner_ok = self.exists(&key);
                }
                if !owner_ok {
                    self.stats.dangling += 1;
                    return Ok(());
                }
                if run.owner != key {
                    self.flush_run(l, &mut run, true)?;
                    run.owner.clear();
                    run.owner.extend_from_slice(&key);
                }
                // A run too long to keep is appended chunk by chunk as it comes (an owner
                // with millions of rows); a run that fits is written whole when it ends.
                if run.len() >= LIST_RUN_TARGETS_MAX || run.bytes.len() >= LIST_RUN_BYTES_MAX {
                    self.flush_run(l, &mut run, false)?;
                }
                // Hashed once, and its key-set slot requested now: the miss overlaps the
                // parsing of the run's next rows instead of waiting for the flush.
                let h = if l.external { 0 } else { hash_key(&target) };
                if !l.external {
                    self.keys.prefetch(h);
                }
                run.push_hashed(&target, h);
                Ok(())
            })?;
            self.flush_run(l, &mut run, true)?;
        }
        self.w.barrier()
    }

    /// Write the pending targets of `run.owner`'s list, chunked at `l.chunk`: target number
    /// `i` of the list goes to item `i / chunk` (0: the owner itself, k ≥ 1:
    /// `owner#field#k`), each item linking the next by `field.next`.
    ///
    /// `complete`: the run is the owner's whole run of rows. If it is also the first run of
    /// this list, the list is written whole (`write_list`): each item once, with its
    /// targets and its `next` link. Otherwise (a source not grouped by owner, or a run too
    /// long to keep) the targets are appended to what the list has (`append_run`).
    fn flush_run(&mut self, l: &List, run: &mut ListRun, complete: bool) -> Result<()> {
        if !l.external {
            // Every target's slot was requested when its row was read (`push_hashed`);
            // checked here by the hash kept then.
            let before = run.len();
            run.retain(|h| self.keys.contains(h));
            self.stats.dangling += (before - run.len()) as u64;
        }
        if run.len() == 0 {
            run.clear();
            return Ok(());
        }
        let id = hash_key(&run.owner) ^ hash_key(&l.field).rotate_left(1);
        let limit_hit = !self.counts.contains_key(&id)
            && self.counts.len() as u64 >= limits::LOAD_LIST_OWNERS_MAX;
        if limit_hit {
            bail!(
                "more than {} link lists: split the load (limits::LOAD_LIST_OWNERS_MAX)",
                limits::LOAD_LIST_OWNERS_MAX
            );
        }
        if complete && !self.counts.contains_key(&id) {
            return self.write_list(l, run, id);
        }
        self.append_run(l, run, id)
    }

    /// The whole list of `run.owner` in one pass: the last item first, so that when an item
    /// is written the item its `next` link names exists and the node gives that link a
    /// location hint; then the owner. One `RECORD SET` per item, which replaces the item's
    /// list field (a reload does not duplicate links) and keeps the owner's attributes.
    /// Before, each item was written by a `LINK ADD` and rewritten whole by the `LINK SET`
    /// of its `next` link (docs/design/loader.md, "Each item written once").
    fn write_list(&mut self, l: &List, run: &mut ListRun, id: u64) -> Result<()> {
        let n = run.len();
        let last = (n - 1) / l.chunk;
        let (mut item, mut next) = (Vec::new(), Vec::new());
        let mut packed = Vec::new();
        for k in (0..=last).rev() {
            item_key(&run.owner, &l.field, k, &mut item);
            let (lo, hi) = (k * l.chunk, ((k + 1) * l.chunk).min(n));
            let has_next = k < last;
            // Over an earlier load, the last item's old `next` link (the list was longer)
            // must not survive: removed in the same write (`DEL next`), where a `DEL item`
            // or `LINK DEL owner next` went before it, one command more per list.
            let del_next = !has_next && !self.fresh;
            // The chunk's targets in one argument (`LINKSPACKED`): the node decodes one bulk
            // string instead of one per link (docs/design/loader.md, "Smaller links").
            packed.clear();
            ringlet_record::Packed::encode((lo..hi).map(|j| run.target(j)), &mut packed);
            let p = self.w.pipe(
                &item,
                6 + if has_next { 3 } else { 0 } + if del_next { 2 } else { 0 },
            );
            p.arg(b"RECORD")
                .arg(b"SET")
                .arg(&item)
                .arg(b"LINKSPACKED")
                .arg(&l.field)
                .arg(&packed);
            if has_next {
                p.arg(b"LINK").arg(&l.next_field).arg(&next);
            }
            if del_next {
                p.arg(b"DEL").arg(&l.next_field);
            }
            p.end()?;
            std::mem::swap(&mut item, &mut next);
        }
        self.stats.links += n as u64;
        let Ok(n) = u32::try_from(n) else {
            bail!("a link list of more than {} targets", u32::MAX);
        };
        self.counts.insert(id, n);
        run.clear();
        Ok(())
    }

    /// Append the pending targets of `run.owner` (already checked) to its list, after the
    /// `counts[id]` targets it has: one `LINK ADD` per chunk, and a new item linked from the
    /// one before by `LINK SET prev field.next item`.
    fn append_run(&mut self, l: &List, run: &mut ListRun, id: u64) -> Result<()> {
        let count = self.counts.entry(id).or_insert(0);
        let mut pos = *count as usize;
        if pos == 0 && !self.fresh {
            // Reloading over an earlier load (no generation): start the list afresh instead
            // of appending to it (both fields in one write; an owner left without fields
            // is deleted, as by `LINK DEL`). Continuation items are reset as they are
            // reached below.
            self.w
                .pipe(&run.owner, 7)
                .arg(b"RECORD")
                .arg(b"SET")
                .arg(&run.owner)
                .arg(b"DEL")
                .arg(&l.field)
                .arg(b"DEL")
                .arg(&l.next_field)
                .end()?;
        }
        let mut item = Vec::new();
        let mut prev = Vec::new();
        let mut i = 0;
        while i < run.len() {
            let k = pos / l.chunk;
            let take = (l.chunk - pos % l.chunk).min(run.len() - i);
            item_key(&run.owner, &l.field, k, &mut item);
            let new_item = k >= 1 && pos.is_multiple_of(l.chunk);
            if new_item && !self.fresh {
                self.w.pipe(&item, 2).arg(b"DEL").arg(&item).end()?;
            }
            let p = self.w.pipe(&item, 4 + take);
            p.arg(b"LINK").arg(b"ADD").arg(&item).arg(&l.field);
            for j in i..i + take {
                p.arg(run.target(j));
            }
            p.end()?;
            if new_item {
                // After the item exists, so that the node fills this link's location hint
                // (a link to a key not written yet gets none, and every chunk hop of a walk
                // was a lookup); a reader also never finds the chain leading to an empty item.
                item_key(&run.owner, &l.field, k - 1, &mut prev);
                self.w
                    .pipe(&prev, 5)
                    .arg(b"LINK")
                    .arg(b"SET")
                    .arg(&prev)
                    .arg(&l.next_field)
                    .arg(&item)
                    .end()?;
            }
            pos += take;
            i += take;
        }
        self.stats.links += run.len() as u64;
        let Ok(pos) = u32::try_from(pos) else {
            bail!("a link list of more than {} targets", u32::MAX);
        };
        *self.counts.get_mut(&id).expect("inserted above") = pos;
        run.clear();
        Ok(())
    }
}

/// The targets of one owner's list seen in a row, not yet sent (at most
/// `LIST_RUN_TARGETS_MAX` of them and `LIST_RUN_BYTES_MAX` bytes); also a row's link
/// targets in pass 2.
#[derive(Default)]
struct ListRun {
    owner: Vec<u8>,
    /// The targets back to back (no allocation per link), each ending at `ends[i]`.
    bytes: Vec<u8>,
    ends: Vec<usize>,
    /// Each target's `hash_key` (list runs: `push_hashed`; 0 for `push`).
    hashes: Vec<u64>,
}

impl ListRun {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn target(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    fn push(&mut self, t: &[u8]) {
        self.push_hashed(t, 0);
    }

    fn push_hashed(&mut self, t: &[u8], h: u64) {
        self.bytes.extend_from_slice(t);
        self.ends.push(self.bytes.len());
        self.hashes.push(h);
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.hashes.clear();
    }

    /// Keep the targets whose hash `keep` accepts, in order.
    fn retain(&mut self, mut keep: impl FnMut(u64) -> bool) {
        let (mut w, mut kept, mut start) = (0usize, 0usize, 0usize);
        for i in 0..self.ends.len() {
            let end = self.ends[i];
            if keep(self.hashes[i]) {
                // Nothing dropped yet (the common case): the target is already in place.
                if w != start {
                    self.bytes.copy_within(start..end, w);
                }
                w += end - start;
                self.ends[kept] = w;
                self.hashes[kept] = self.hashes[i];
                kept += 1;
            }
            start = end;
        }
        self.bytes.truncate(w);
        self.ends.truncate(kept);
        self.hashes.truncate(kept);
    }
}

/// Item `k` of `owner`'s list `field`: the owner itself, then `owner#field#k`.
fn item_key(owner: &[u8], field: &[u8], k: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(owner);
    if k > 0 {
        out.push(b'#');
        out.extend_from_slice(field);
        out.push(b'#');
        out.extend_from_slice(itoa::Buffer::new().format(k).as_bytes());
    }
}

// ---------------------------------------------------------------------------------------------
// Runs and generations

/// `ringlet load`: one load, one generation (`--alias`), or a generation every `--every`.
///
/// # Errors
/// A bad mapping or source, a node that cannot be reached, or commands the nodes refused.
/// With `--every`, only the first generation's failure ends the run; later ones are
/// reported and the published generation stays.
pub fn run(a: &LoadArgs) -> Result<()> {
    let specs = source_specs(a)?;
    let text = std::fs::read_to_string(&a.mapping)
        .with_context(|| format!("cannot read the mapping {}", a.mapping.display()))?;
    let mapping: Mapping =
        toml::from_str(&text).with_context(|| format!("mapping {}", a.mapping.display()))?;
    let map = compile(mapping, &specs)?;
    let Some(alias) = &a.alias else {
        load_once(a, &specs, &map, Vec::new(), false)?;
        return Ok(());
    };
    if alias.is_empty() {
        bail!("--alias: empty");
    }
    generation(a, &specs, &map, alias)?;
    let Some(every) = a.every else {
        return Ok(());
    };
    // Runs until killed: each period loads a new generation; a failed one is reported and
    // the published generation stays (its partial keys are deleted at the next attempt).
    let mut next = Instant::now() + every;
    for _ in 1..a.count.unwrap_or(u64::MAX) {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        next += every;
        if let Err(e) = generation(a, &specs, &map, alias) {
            eprintln!("ringlet load: error: generation not published: {e:#}");
        }
        let now = Instant::now();
        if next < now {
            next = now; // a load longer than the period: start the next one at once
        }
    }
    Ok(())
}

/// Load everything once, under `prefix`; `fresh`: the keys under `prefix` cannot exist yet
/// (a new generation), so lists need no reset.
fn load_once(
    a: &LoadArgs,
    specs: &[SourceSpec],
    map: &Compiled,
    prefix: Vec<u8>,
    fresh: bool,
) -> Result<Stats> {
    let t0 = Instant::now();
    let pw = a.conn.password.as_deref();
    let topo = topology(&a.conn.host, a.conn.port, pw)?;
    let w = Writer::open(topo, usize::from(a.connections), pw)?;
    let mut snap = Snapshot::open(a, specs)?;
    let mut load = Load {
        map,
        prefix,
        fresh,
        w,
        keys: KeySet::new(),
        counts: HashedMap::default(),
        stats: Stats::default(),
        bar: bar("pass 1/2 records"),
    };
    let links = !map.lists.is_empty() || map.records.iter().any(|r| !r.links.is_empty());
    // Before pass 1, when every record source is a file: at most how many records this load
    // writes (`Snapshot::rows_bound`, one read of each file). The key set is sized for them
    // (no doubling while pass 1 fills it), and so is each node's index, with as many again
    // for the chunk items as the reserve before pass 2 asks: pass 1 then does not grow the
    // index step by step, and that reserve finds it large enough. Each growth moves every
    // index entry (a random read of its data entry for its key, and a new table's pages): at
    // 200,000 records from the default index, five growths in pass 1 and one before pass 2,
    // ~0.1 s of the node's ~0.6 s of user CPU (docs/design/loader.md, "Session 21"). Quiet:
    // the reserve before pass 2 reports a node that refuses.
    let mut bound = Some(0u64);
    for r in &map.records {
        bound = match (bound, snap.rows_bound(r.source)?) {
            (Some(b), Some(n)) => Some(b.saturating_add(n)),
            _ => None,
        };
    }
    // Asked once for both reserves (a `MEMGEST INFO` round trip).
    let holders = if a.no_index_reserve {
        1
    } else {
        holders_per_key(&load.w.topo, pw)
    };
    if let Some(rows) = bound.filter(|&n| n > 0) {
        let rows = rows.min(limits::LOAD_RECORDS_MAX);
        load.keys.reserve(rows);
        if !a.no_index_reserve {
            let want = if links { rows.saturating_mul(2) } else { rows };
            reserve_index(&load.w.topo, pw, want, holders, false);
        }
    }
    load.pass1(&mut snap)?;
    load.bar.finish_and_clear();
    if !a.no_index_reserve && links {
        reserve_index(&load.w.topo, pw, load.stats.records, holders, true);
    }
    load.bar = bar("pass 2/2 links");
    load.pass2(&mut snap)?;
    load.bar.finish_and_clear();
    snap.close()?;
    let secs = t0.elapsed().as_secs_f64();
    let s = load.stats;
    println!(
        "ringlet load: {} records, {} links, {} dangling, {} skipped rows, {:.3} s, {:.0} records/s",
        s.records,
        s.links,
        s.dangling,
        s.skipped,
        secs,
        s.records as f64 / secs.max(1e-9)
    );
    if let Some(why) = &s.first_skip {
        eprintln!("ringlet load: skipped rows, the first: {why}");
    }
    if s.dangling > 0 {
        eprintln!(
            "ringlet load: {} links not written: their target (or list owner) is not a record \
             of this load (mark a link `external = true` to write it anyway)",
            s.dangling
        );
    }
    std::io::stdout().flush()?;
    Ok(s)
}

/// Before pass 2 (which writes every link and fills its location hint): ask each node to
/// size its index for its keys now plus as many again as this load wrote (`CONFIG SET
/// index-keys`; before pass 1 too, for a bound of the records: `load_once`), so that the chunk items pass 2 adds do not grow the index in the middle of
/// it. A hint names the target's data entry and its index entry; the data part goes stale
/// when the target is rewritten (its own links are added later in pass 2), the index part
/// when the index grows, and a hint with both stale costs a lookup (docs/design/loader.md,
/// "Index pre-sizing"). Best effort: a node that refuses (an older server, or a cluster node
/// before session 23) is named once on stderr (`report`) and the load goes on. A cluster
/// node's engine holds an index entry for every key it holds a copy of, so its share is the
/// records times the default memgest's copies per key ([`holders_per_key`]: 3 for `rep:3`)
/// over the nodes; it was the records over the nodes until session 24, which left a
/// replicated memgest's indexes growing during the load.
fn reserve_index(
    topo: &Topology,
    password: Option<&str>,
    records: u64,
    holders: u64,
    report: bool,
) {
    let share = records
        .saturating_mul(holders)
        .div_ceil(topo.nodes.len().max(1) as u64);
    let mut refused: Vec<(&str, anyhow::Error)> = Vec::new();
    for n in &topo.nodes {
        let r = connect(n, password).and_then(|mut s| {
            let Reply::Integer(keys) = call(&mut s, &[b"DBSIZE"])? else {
                bail!("DBSIZE: not an integer");
            };
            // DBSIZE counts the keys a cluster node coordinates; its engine holds copies of
            // its peers' too.
            let held = (keys.max(0) as u64).saturating_mul(holders);
            let want = held.saturating_add(share).to_string();
            match call(&mut s, &[b"CONFIG", b"SET", b"index-keys", want.as_bytes()])? {
                Reply::Error(e) => bail!("{}", String::from_utf8_lossy(&e)),
                _ => Ok(()),
            }
        });
        if let Err(e) = r {
            refused.push((n, e));
        }
    }
    if !report {
        return;
    }
    // A cluster whose nodes have no `index-keys` (before session 23): say so once, plainly,
    // instead of one error per node; the load goes on (hints are a speed-up, a stale one
    // costs a lookup, never a wrong item).
    if topo.slot_node.is_some() && !refused.is_empty() && refused.len() == topo.nodes.len() {
        eprintln!(
            "ringlet load: index pre-sizing is not available on this cluster's nodes (CONFIG SET \
             index-keys: {}); loading without it: a link whose target's node grows its index \
             during pass 2 keeps a stale hint, followed by a lookup",
            refused[0].1
        );
        return;
    }
    for (n, e) in refused {
        eprintln!("ringlet load: {n} did not pre-size its index ({e}); hints may go stale");
    }
}

/// How many nodes' engines hold an index entry for each key of the cluster's default
/// memgest (`MEMGEST INFO`: the section marked `default:1`, its `descriptor`): R for
/// `rep:R`; 1 for `none`, and for `ec:K+M`, whose value is in the coordinator's arena with
/// one engine entry there while the parity holders keep its metadata apart
/// (docs/design/cluster-ec.md); 1 too when the node does not say (an older node, an
/// unknown descriptor), the sizing before session 24; and 1 for a single node. At most the
/// number of nodes.
fn holders_per_key(topo: &Topology, password: Option<&str>) -> u64 {
    if topo.slot_node.is_none() {
        return 1;
    }
    let info =
        connect(&topo.nodes[0], password).and_then(|mut s| call(&mut s, &[b"MEMGEST", b"INFO"]));
    let Ok(Reply::Bulk(text)) = info else {
        return 1;
    };
    let text = String::from_utf8_lossy(&text);
    text.split("# ")
        .find(|section| section.lines().any(|l| l.trim() == "default:1"))
        .and_then(|section| {
            section
                .lines()
                .find_map(|l| l.trim().strip_prefix("descriptor:"))
                .and_then(holders_of)
        })
        .unwrap_or(1)
        .min(topo.nodes.len().max(1) as u64)
}

/// Engine entries per key of a memgest descriptor (see [`holders_per_key`]).
fn holders_of(descriptor: &str) -> Option<u64> {
    if let Some(r) = descriptor.strip_prefix("rep:") {
        return r.parse().ok().filter(|&r| r >= 1);
    }
    (descriptor == "none" || descriptor.starts_with("ec:")).then_some(1)
}

/// The prefix of generation `gen` of `alias`.
fn gen_prefix(alias: &str, gen: u64) -> String {
    format!("{alias}@{gen}:")
}

/// The generation whose prefix starts `key`, if it has one of `alias`'s.
fn gen_of(key: &[u8], alias: &str) -> Option<u64> {
    let rest = key.strip_prefix(alias.as_bytes())?.strip_prefix(b"@")?;
    let colon = rest.iter().position(|&b| b == b':')?;
    let digits = &rest[..colon];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// A control call on the node of `key`'s slot (MOVED followed).
fn call_routed(a: &LoadArgs, args: &[&[u8]]) -> Result<Reply> {
    let mut addr = format!("{}:{}", a.conn.host, a.conn.port);
    for _ in 0..=REDIRECTS_MAX {
        let mut s = connect(&addr, a.conn.password.as_deref())?;
        match call(&mut s, args)? {
            Reply::Error(e) if e.starts_with(b"MOVED ") => {
                let t = String::from_utf8_lossy(&e).into_owned();
                addr = t
                    .split(' ')
                    .nth(2)
                    .ok_or_else(|| anyhow!("bad redirect {t:?}"))?
                    .to_string();
            }
            r => return Ok(r),
        }
    }
    bail!("more than {REDIRECTS_MAX} redirects")
}

/// The generation `alias` publishes now, if any.
fn published(a: &LoadArgs, alias: &str) -> Result<Option<u64>> {
    match call_routed(a, &[b"GET", alias.as_bytes()])? {
        Reply::Null => Ok(None),
        Reply::Bulk(v) => match gen_of(&v, alias) {
            Some(g) if v.len() == gen_prefix(alias, g).len() => Ok(Some(g)),
            _ => bail!(
                "the alias key {alias:?} holds {:?}, not a generation prefix of this alias",
                String::from_utf8_lossy(&v)
            ),
        },
        r => bail!("GET {alias}: {}", show(&r)),
    }
}

/// Load a new generation and publish it, then (after `--grace`) delete every other.
fn generation(a: &LoadArgs, specs: &[SourceSpec], map: &Compiled, alias: &str) -> Result<()> {
    let cur = published(a, alias)?;
    // Leftovers of an attempt that failed before publishing would make the new generation's
    // keys not fresh: delete every generation but the published one first.
    delete_generations_except(a, alias, cur)?;
    let gen = cur.map_or(1, |g| g + 1);
    let prefix = gen_prefix(alias, gen);
    load_once(a, specs, map, prefix.clone().into_bytes(), true)?;
    // The swap: one single-key write, after every write of the generation was acknowledged.
    match call_routed(a, &[b"SET", alias.as_bytes(), prefix.as_bytes()])? {
        Reply::Simple(_) => {}
        r => bail!("SET {alias}: {}", show(&r)),
    }
    println!("ringlet load: generation {gen} published: {alias} -> {prefix}");
    std::io::stdout().flush()?;
    std::thread::sleep(a.grace);
    let n = delete_generations_except(a, alias, Some(gen))?;
    println!("ringlet load: deleted {n} keys of older generations");
    std::io::stdout().flush()?;
    Ok(())
}

/// Escape glob metacharacters (SCAN MATCH).
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// SCAN every node for keys of `alias`'s generations other than `keep` and delete them.
/// Returns how many were deleted.
fn delete_generations_except(a: &LoadArgs, alias: &str, keep: Option<u64>) -> Result<u64> {
    let pw = a.conn.password.as_deref();
    let topo = topology(&a.conn.host, a.conn.port, pw)?;
    let nodes = topo.nodes.clone();
    let mut w = Writer::open(topo, 1, pw)?;
    let pattern = format!("{}@*", glob_escape(alias));
    let mut deleted = 0u64;
    for node in &nodes {
        let mut s = connect(node, pw)?;
        let mut cursor = b"0".to_vec();
        for page in 0.. {
            if page >= SCAN_PAGES_MAX {
                bail!("SCAN of {node} did not end after {SCAN_PAGES_MAX} pages");
            }
            let r = call(
                &mut s,
                &[
                    b"SCAN",
                    &cursor,
                    b"MATCH",
                    pattern.as_bytes(),
                    b"COUNT",
                    b"1000",
                ],
            )?;
            let Reply::Array(v) = r else {
                bail!("SCAN at {node}: {}", show(&r));
            };
            let (Some(Reply::Bulk(next)), Some(Reply::Array(keys))) = (v.first(), v.get(1)) else {
                bail!("SCAN at {node}: unexpected reply");
            };
            for k in keys {
                let Reply::Bulk(k) = k else { continue };
                match gen_of(k, alias) {
                    Some(g) if Some(g) != keep => {
                        w.pipe(k, 2).arg(b"DEL").arg(k).end()?;
                        deleted += 1;
                    }
                    _ => {}
                }
            }
            if next.as_slice() == b"0" {
                break;
            }
            cursor = next.clone();
        }
    }
    w.barrier()?;
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Engine entries per key by descriptor: a rep:R key is held whole by R engines, a
    /// none key by one, an ec key by its coordinator's alone; anything else says nothing.
    #[test]
    fn holders_of_descriptors() {
        assert_eq!(holders_of("none"), Some(1));
        assert_eq!(holders_of("rep:3"), Some(3));
        assert_eq!(holders_of("rep:1"), Some(1));
        assert_eq!(holders_of("ec:3+2"), Some(1));
        assert_eq!(holders_of("rep:0"), None);
        assert_eq!(holders_of("rep:x"), None);
        assert_eq!(holders_of("raid"), None);
    }

    /// A file's row bound is its lines, a last line without its newline included; a query
    /// has none (counting would run it again).
    #[test]
    fn rows_bound_counts_lines() {
        let dir = std::env::temp_dir().join(format!("ringlet-rows-bound-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cases: [(&str, &[u8], u64); 4] = [
            ("empty", b"", 0),
            ("ended", b"id\n1\n2\n", 3),
            ("unended", b"id\n1\n2", 3),
            ("blank", b"id\n\n1\n", 3),
        ];
        let mut specs = Vec::new();
        for (name, bytes, _) in &cases {
            let p = dir.join(format!("{name}.csv"));
            std::fs::write(&p, bytes).unwrap();
            specs.push(SourceSpec {
                name: name.to_string(),
                kind: SourceKind::Csv(p),
            });
        }
        specs.push(SourceSpec {
            name: "q".into(),
            kind: SourceKind::Query("SELECT 1".into()),
        });
        let files = specs
            .iter()
            .map(|s| match &s.kind {
                SourceKind::Csv(p) => Some(File::open(p).unwrap()),
                _ => None,
            })
            .collect();
        let mut snap = Snapshot {
            specs: &specs,
            files,
            db: None,
        };
        for (i, (name, _, want)) in cases.iter().enumerate() {
            assert_eq!(snap.rows_bound(i).unwrap(), Some(*want), "{name}");
        }
        assert_eq!(snap.rows_bound(cases.len()).unwrap(), None);
        // The file is rewound: a scan after the count reads every row.
        let mut rows = 0;
        snap.scan(1, &["id".to_string()], &mut |_| {
            rows += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(rows, 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn row(vals: &[Option<&str>]) -> Row {
        let mut r = Row::default();
        r.reset(vals.len());
        for (i, v) in vals.iter().enumerate() {
            if let Some(v) = v {
                r.set(i, v.as_bytes());
            }
        }
        r
    }

    #[test]
    fn templates_render_columns_and_escape_braces() {
        let mut cols = vec!["id".to_string()];
        let t = Template::parse("user:{{{id}}}:{name}", &mut cols).unwrap();
        assert_eq!(cols, ["id", "name"]);
        let mut out = Vec::new();
        assert!(t.render(&row(&[Some("7"), Some("ann")]), b"g@1:", &mut out));
        assert_eq!(out, b"g@1:user:{7}:ann");
        // A null or empty column: no key.
        assert!(!t.render(&row(&[Some("7"), None]), b"", &mut out));
        assert!(!t.render(&row(&[Some(""), Some("x")]), b"", &mut out));
        for bad in ["user:{id", "user:}", "constant", "a{}b"] {
            assert!(Template::parse(bad, &mut cols).is_err(), "{bad}");
        }
    }

    #[test]
    fn generation_prefixes_parse_back() {
        assert_eq!(gen_of(b"cat@12:user:1", "cat"), Some(12));
        assert_eq!(gen_of(b"cat@12:", "cat"), Some(12));
        assert_eq!(gen_of(b"cat@x:user:1", "cat"), None);
        assert_eq!(gen_of(b"cat@12user", "cat"), None);
        assert_eq!(gen_of(b"catalog@1:u", "cat"), None);
        assert_eq!(glob_escape("a*b[c]"), "a\\*b\\[c\\]");
    }

    #[test]
    fn key_sets_and_list_runs() {
        let mut k = KeySet::new();
        for i in 0..5000u64 {
            k.insert(hash_key(format!("v:{i}").as_bytes()));
        }
        k.insert(0);
        k.insert(hash_key(b"v:7"));
        assert_eq!(k.len(), 5001);
        assert!((0..5000u64).all(|i| k.contains(hash_key(format!("v:{i}").as_bytes()))));
        assert!(!(5000..6000u64).any(|i| k.contains(hash_key(format!("v:{i}").as_bytes()))));
        assert!(k.contains(0) && k.contains(1));
        let mut r = ListRun::default();
        for t in ["a", "bb", "", "ccc", "d", "ee"] {
            r.push_hashed(t.as_bytes(), hash_key(t.as_bytes()));
        }
        let (bb, d) = (hash_key(b"bb"), hash_key(b"d"));
        r.retain(|h| h != bb && h != d);
        let got: Vec<&[u8]> = (0..r.len()).map(|i| r.target(i)).collect();
        assert_eq!(got, [&b"a"[..], b"", b"ccc", b"ee"]);
        // The hashes moved with their targets.
        assert!((0..r.len()).all(|i| r.hashes[i] == hash_key(r.target(i))));
        r.clear();
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn list_items_are_named_by_chunk() {
        let mut out = Vec::new();
        item_key(b"user:1", b"follows", 0, &mut out);
        assert_eq!(out, b"user:1");
        item_key(b"user:1", b"follows", 2, &mut out);
        assert_eq!(out, b"user:1#follows#2");
    }

    #[test]
    fn names_split_only_at_a_leading_name() {
        assert_eq!(split_name("users=a.csv"), (Some("users"), "a.csv"));
        assert_eq!(
            split_name("SELECT a FROM t WHERE a=1"),
            (None, "SELECT a FROM t WHERE a=1")
        );
        assert_eq!(split_name("/tmp/x.csv"), (None, "/tmp/x.csv"));
    }

    #[test]
    fn mappings_are_checked() {
        let specs = vec![
            SourceSpec {
                name: "users".into(),
                kind: SourceKind::Csv("u.csv".into()),
            },
            SourceSpec {
                name: "follows".into(),
                kind: SourceKind::Csv("f.csv".into()),
            },
        ];
        let ok = r#"
            [[records]]
            source = "users"
            key = "user:{id}"
            attributes = ["name"]
            links = [{ field = "boss", target = "user:{boss_id}" }]
            [[lists]]
            source = "follows"
            key = "user:{src}"
            field = "follows"
            target = "user:{dst}"
            chunk = 2
        "#;
        let c = compile(toml::from_str(ok).unwrap(), &specs).unwrap();
        assert_eq!(c.records[0].cols, ["id", "name", "boss_id"]);
        assert_eq!(c.lists[0].next_field, b"follows.next");
        let no_source = ok.replace("source = \"users\"\n", "");
        assert!(compile(toml::from_str(&no_source).unwrap(), &specs).is_err());
        let big = ok.replace("chunk = 2", "chunk = 5000");
        assert!(compile(toml::from_str(&big).unwrap(), &specs).is_err());
        let clash = ok.replace("field = \"boss\"", "field = \"name\"");
        assert!(compile(toml::from_str(&clash).unwrap(), &specs).is_err());
        assert!(toml::from_str::<Mapping>("[[records]]\nkey = \"k{id}\"\ncolor = 1").is_err());
    }
}
