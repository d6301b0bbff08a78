//! MCP tool schemas: each session's catalogue of tools (names and the texts of their
//! `inputSchema` / `outputSchema`, gathered over every page of `tools/list`), and one shared,
//! bounded cache of compiled validators keyed by schema text — many sessions of one server list
//! the same tools, and each distinct schema is compiled once. Beyond the cache's cap the oldest
//! validator is dropped (counted); a schema whose validator was dropped is compiled again when
//! next needed, from the text its sessions keep.

use crate::locks::Locked as _;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A compiled schema, or why it could not be compiled (then nothing is validated against it).
pub type Compiled = Result<jsonschema::Validator, String>;

/// The most tools one session's catalogue keeps; a longer list is kept in part and never
/// counts as complete (so no call is judged against it).
pub const MAX_TOOLS: usize = 4096;

/// One tool's schemas, as texts (keys into the [`SchemaCache`]).
#[derive(Clone, Debug, Default)]
pub struct ToolSchemas {
    pub input: Option<Arc<str>>,
    pub output: Option<Arc<str>>,
    /// The arguments its `inputSchema` mirrors into `Mcp-Param-*` headers (`x-mcp-header`).
    pub params: Option<Arc<[super::modern::ParamHeader]>>,
}

/// A session's tools.
#[derive(Debug, Default)]
pub struct Catalogue {
    /// The last complete list (every page seen).
    tools: HashMap<Arc<str>, ToolSchemas>,
    /// `tools` is a whole list and still current (no `list_changed` since).
    complete: bool,
    /// A paginated list being gathered (its first page was seen, its last not yet).
    building: Option<HashMap<Arc<str>, ToolSchemas>>,
    /// The list being gathered overflowed `MAX_TOOLS`.
    truncated: bool,
    /// The tool names of the last complete list, and of the one being gathered, in the order
    /// the server gave them.
    order: Vec<Arc<str>>,
    building_order: Vec<Arc<str>>,
}

impl Catalogue {
    /// A `tools/list` call without a cursor: a new list starts.
    pub fn start_list(&mut self) {
        self.building = Some(HashMap::new());
        self.building_order.clear();
        self.truncated = false;
    }

    /// One page of a `tools/list` result; `last` when it has no `nextCursor`. When it completes
    /// a list of the same tools as the last complete one in another order: where they first
    /// differ (position, the tool now there, the tool there before).
    pub fn add_page(
        &mut self,
        tools: Vec<(Arc<str>, ToolSchemas)>,
        last: bool,
    ) -> Option<(usize, Arc<str>, Arc<str>)> {
        let page = self.building.get_or_insert_with(HashMap::new);
        for (name, s) in tools {
            if page.len() >= MAX_TOOLS {
                self.truncated = true;
                break;
            }
            self.building_order.push(name.clone());
            page.insert(name, s);
        }
        if !last {
            return None;
        }
        let all = self.building.take()?;
        let order = std::mem::take(&mut self.building_order);
        let same_set = !self.truncated
            && !self.order.is_empty()
            && order.len() == self.order.len()
            && all.len() == self.tools.len()
            && all.keys().all(|k| self.tools.contains_key(k));
        let moved = same_set
            .then(|| {
                order
                    .iter()
                    .zip(&self.order)
                    .enumerate()
                    .find(|(_, (a, b))| a != b)
                    .map(|(i, (a, b))| (i, a.clone(), b.clone()))
            })
            .flatten();
        self.tools = all;
        self.order = order;
        self.complete = !self.truncated;
        moved
    }

    /// `notifications/tools/list_changed`: the list may be stale until listed again.
    pub fn changed(&mut self) {
        self.complete = false;
    }

    /// A tool's schemas: from the complete list, else from the pages being gathered.
    pub fn get(&self, name: &str) -> Option<&ToolSchemas> {
        self.tools
            .get(name)
            .or_else(|| self.building.as_ref().and_then(|b| b.get(name)))
    }

    /// Whether a call of `name` is of a tool the session was never offered: only when the
    /// whole list is known and current.
    pub fn unknown(&self, name: &str) -> bool {
        self.complete && self.get(name).is_none()
    }

    pub fn is_complete(&self) -> bool {
        self.complete
    }
}

/// The shared cache of compiled schemas (a std mutex, taken only by synchronous code and never
/// across an `.await`; held while one schema compiles, once per distinct schema).
#[derive(Debug)]
pub struct SchemaCache {
    inner: Mutex<CacheInner>,
    cap: usize,
    pub compiled: AtomicU64,
    pub evicted: AtomicU64,
}

#[derive(Debug, Default)]
struct CacheInner {
    by_text: HashMap<Arc<str>, Arc<Compiled>>,
    order: VecDeque<Arc<str>>,
}

impl SchemaCache {
    pub fn new(cap: usize) -> Self {
        SchemaCache {
            inner: Mutex::new(CacheInner::default()),
            cap: cap.max(1),
            compiled: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        }
    }

    /// Validators kept now.
    pub fn len(&self) -> usize {
        self.inner.locked().by_text.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key a schema text is kept under (the text already cached, if it is: sessions of one
    /// server share it), compiling it if it is new.
    pub fn intern(&self, text: &str) -> Arc<str> {
        let mut c = self.inner.locked();
        if let Some((k, _)) = c.by_text.get_key_value(text) {
            return k.clone();
        }
        let key: Arc<str> = text.into();
        let v = Arc::new(compile(text));
        self.compiled.fetch_add(1, Ordering::Relaxed);
        self.insert(&mut c, key.clone(), v);
        key
    }

    /// The validator of a schema text (compiled again if it was dropped).
    pub fn get(&self, text: &Arc<str>) -> Arc<Compiled> {
        let mut c = self.inner.locked();
        if let Some(v) = c.by_text.get(text) {
            return v.clone();
        }
        let v = Arc::new(compile(text));
        self.compiled.fetch_add(1, Ordering::Relaxed);
        self.insert(&mut c, text.clone(), v.clone());
        v
    }

    fn insert(&self, c: &mut CacheInner, key: Arc<str>, v: Arc<Compiled>) {
        while c.by_text.len() >= self.cap {
            let Some(old) = c.order.pop_front() else {
                break;
            };
            if c.by_text.remove(&old).is_some() {
                self.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        c.order.push_back(key.clone());
        c.by_text.insert(key, v);
    }
}

fn compile(text: &str) -> Compiled {
    let schema: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    jsonschema::validator_for(&schema).map_err(|e| e.to_string())
}

/// The first way `instance` fails `v`, as "at `/pointer`: what" (`None` when it passes).
pub fn first_failure(v: &jsonschema::Validator, instance: &serde_json::Value) -> Option<String> {
    let e = v.iter_errors(instance).next()?;
    let at = e.instance_path().as_str();
    let at = if at.is_empty() { "/" } else { at };
    let mut what = e.to_string();
    if what.len() > 300 {
        let mut cut = 300;
        while !what.is_char_boundary(cut) {
            cut -= 1;
        }
        what.truncate(cut);
        what.push('…');
    }
    Some(format!("at `{at}`: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_compile_per_distinct_schema_and_a_bounded_cache() {
        let c = SchemaCache::new(2);
        let a1 = c.intern(r#"{"type":"object"}"#);
        let a2 = c.intern(r#"{"type":"object"}"#);
        assert!(Arc::ptr_eq(&a1, &a2), "the same text is shared");
        assert_eq!(c.compiled.load(Ordering::Relaxed), 1);
        c.intern(r#"{"type":"string"}"#);
        c.intern(r#"{"type":"number"}"#);
        assert_eq!(c.len(), 2);
        assert_eq!(c.evicted.load(Ordering::Relaxed), 1);
        // The dropped one compiles again when needed.
        let v = c.get(&a1);
        assert!(v
            .as_ref()
            .as_ref()
            .unwrap()
            .is_valid(&serde_json::json!({})));
        assert_eq!(c.compiled.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn failure_names_the_pointer() {
        let v = jsonschema::validator_for(&serde_json::json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"]
        }))
        .unwrap();
        let f = first_failure(&v, &serde_json::json!({"n": "x"})).unwrap();
        assert!(f.starts_with("at `/n`"), "{f}");
        assert!(first_failure(&v, &serde_json::json!({"n": 1})).is_none());
    }

    #[test]
    fn pages_make_a_complete_list_and_list_changed_makes_it_stale() {
        let mut cat = Catalogue::default();
        cat.start_list();
        cat.add_page(vec![("a".into(), ToolSchemas::default())], false);
        assert!(!cat.unknown("zz"), "not complete yet");
        assert!(cat.get("a").is_some());
        cat.add_page(vec![("b".into(), ToolSchemas::default())], true);
        assert!(cat.unknown("zz") && !cat.unknown("a") && !cat.unknown("b"));
        cat.changed();
        assert!(!cat.unknown("zz"));
    }
}
