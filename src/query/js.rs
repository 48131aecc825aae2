//! Server-side JavaScript: what `$where`, `$function`, `$accumulator` and
//! `mapReduce` run, on an embedded QuickJS engine (`rquickjs`).
//!
//! The sandbox: the engine is QuickJS without its `std` and `os` modules
//! and without a module loader, so a script reaches no file, network or
//! process; it sees the ECMAScript built-ins and the few helpers MongoDB's
//! server gives its scripts (`ObjectId`, `NumberLong`, `NumberInt`,
//! `NumberDecimal`, `Timestamp`, `BinData`, `Array.sum`, `Array.avg`,
//! `tojson`, `isNumber`, ...). Each call runs under a time limit
//! ([`Limits::call_time`], checked by the engine's interrupt handler) and
//! the operation's own `maxTimeMS`, `killOp` and client disconnect
//! (through [`interrupt`](crate::query::interrupt)); each thread's runtime
//! has a memory limit. A script past either fails its operation with a
//! MongoDB-shaped error, and the runtime it ran in is thrown away.
//!
//! Runtimes are one per thread and live as long as the thread. The
//! functions of one operation share a *scope* ([`JsScope`]): a QuickJS
//! context of their own, so globals one operation sets are never seen by
//! another, created and compiled at most once per thread that runs the
//! operation, then reused for every document. A thread keeps its most
//! recently used scopes' contexts, a few of them.
//!
//! Values cross as MongoDB's server converts them: a double or an int32
//! is a JS number, an int64 a `NumberLong`, a date a `Date`, an ObjectId an
//! `ObjectId` whose `str` is its hex string; every JS number comes back as
//! a double (MongoDB's rule: `NumberInt`/`NumberLong` objects stay integers).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::oid::ObjectId;
use bson::spec::BinarySubtype;
use bson::{Binary, Bson, DateTime, Decimal128, Document, Regex, Timestamp};
use rquickjs::context::EvalOptions;
use rquickjs::function::Args;
use rquickjs::{
    Array, Constructor, Context, Ctx, Function, Object, Persistent, Runtime, Type, Value,
};

use crate::error::{Error, ErrorCode, Result};

// ---------------------------------------------------------------------------
// Settings

static ENABLED: AtomicBool = AtomicBool::new(true);
static CALL_TIME_MS: AtomicU64 = AtomicU64::new(DEFAULT_CALL_TIME_MS);
static MEMORY_BYTES: AtomicUsize = AtomicUsize::new(DEFAULT_MEMORY_BYTES);

/// The default time one call of a script may run.
pub const DEFAULT_CALL_TIME_MS: u64 = 5_000;
/// The default memory one thread's JavaScript runtime may hold.
pub const DEFAULT_MEMORY_BYTES: usize = 128 << 20;
/// Native stack one script may use (deep recursion fails with a
/// `RangeError`, not a crash).
const STACK_BYTES: usize = 256 << 10;
/// Contexts (operations' scopes) one thread keeps compiled.
const CONTEXTS_PER_THREAD: usize = 8;
/// Nesting a value converted from JavaScript may have (MongoDB's limit;
/// deeper is most likely a cycle).
const MAX_DEPTH: usize = 150;

/// The server's JavaScript settings (`--javascript`,
/// `--javascript-time-limit-ms`, `--javascript-memory-mb`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub enabled: bool,
    pub call_time: Duration,
    pub memory_bytes: usize,
}

/// Installs the server's settings; runtimes made afterwards take them.
pub fn configure(limits: Limits) {
    ENABLED.store(limits.enabled, Ordering::Relaxed);
    CALL_TIME_MS.store(
        u64::try_from(limits.call_time.as_millis()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    MEMORY_BYTES.store(limits.memory_bytes, Ordering::Relaxed);
}

/// Whether server-side JavaScript is on (`--javascript on`).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// MongoDB's refusal of `$where` on a server without a script engine
/// (`mongod --noscripting`).
pub fn where_disabled_error() -> Error {
    Error::new(
        ErrorCode::Location(6108304),
        "no globalScriptEngine in $where parsing",
    )
}

/// MongoDB's refusal of `$function` and `$accumulator` without a script
/// engine.
pub fn function_disabled_error() -> Error {
    Error::new(
        ErrorCode::Location(31264),
        "Cannot run server-side javascript without the javascript engine enabled",
    )
}

/// MongoDB's refusal of `mapReduce`'s `emit` without a script engine.
pub fn map_reduce_disabled_error() -> Error {
    Error::new(
        ErrorCode::Location(31246),
        "Cannot run server-side javascript without the javascript engine enabled",
    )
}

// ---------------------------------------------------------------------------
// Scopes and functions

static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);

/// The JavaScript of one operation: its functions share globals (and the
/// `scope` of `mapReduce`), apart from every other operation's.
#[derive(Debug)]
pub struct JsScope {
    id: u64,
    /// Globals set before any function runs (`mapReduce`'s `scope`).
    globals: Document,
    sources: Vec<String>,
}

/// One function of a [`JsScope`], compiled once per thread that calls it.
#[derive(Debug, Clone)]
pub struct JsFunction {
    scope: Arc<JsScope>,
    index: usize,
}

/// Builds a [`JsScope`]: add its functions, then [`ScopeBuilder::finish`].
pub struct ScopeBuilder {
    globals: Document,
    sources: Vec<String>,
}

impl ScopeBuilder {
    pub fn new(globals: Document) -> ScopeBuilder {
        ScopeBuilder {
            globals,
            sources: Vec::new(),
        }
    }

    /// Adds a function given as MongoDB takes one: the source of a
    /// function (`function(a) { ... }`, an arrow function) or of an
    /// expression or statements that become its body (`this.a > 1`).
    /// Returns its index for [`ScopeBuilder::finish`].
    pub fn add(&mut self, source: &str) -> usize {
        self.sources.push(source.to_string());
        self.sources.len() - 1
    }

    /// The scope and its functions, in the order they were added.
    pub fn finish(self) -> Vec<JsFunction> {
        let scope = Arc::new(JsScope {
            id: NEXT_SCOPE.fetch_add(1, Ordering::Relaxed),
            globals: self.globals,
            sources: self.sources,
        });
        (0..scope.sources.len())
            .map(|index| JsFunction {
                scope: scope.clone(),
                index,
            })
            .collect()
    }
}

impl JsFunction {
    /// A function in a scope of its own.
    pub fn new(source: &str) -> Result<JsFunction> {
        let mut builder = ScopeBuilder::new(Document::new());
        builder.add(source);
        let f = builder
            .finish()
            .pop()
            .ok_or_else(|| Error::internal("no function"))?;
        Ok(f)
    }

    /// The source as given.
    pub fn source(&self) -> &str {
        &self.scope.sources[self.index]
    }

    /// Compiles the function on this thread now, so a syntax error fails
    /// the operation before any document is read.
    pub fn check(&self) -> Result<()> {
        with_function(self, |_, _| Ok(()))
    }

    /// Calls the function with `this` bound to `this` (a document, or
    /// `undefined`) and `args`; returns its result as BSON.
    pub fn call(&self, this: Option<&Document>, args: &[Bson]) -> Result<Bson> {
        with_function(self, |ctx, f| {
            let value = invoke(ctx, f, this, args, this)?;
            to_bson(&value, 0, &mut 0)
        })
    }

    /// Calls the function as `$where` does: `this` and the global `obj`
    /// are the document; the result's JavaScript truthiness is the match.
    pub fn call_predicate(&self, doc: &Document) -> Result<bool> {
        with_function(self, |ctx, f| {
            let value = invoke(ctx, f, Some(doc), &[], Some(doc))?;
            Ok(js_truthy(&value))
        })
    }

    /// Calls a `mapReduce` map function on `doc`: returns what it passed
    /// to `emit`, as (key, value) pairs.
    pub fn call_map(&self, doc: &Document) -> Result<Vec<(Bson, Bson)>> {
        with_function(self, |ctx, f| {
            let globals = ctx.globals();
            let emits = Array::new(ctx.clone()).map_err(|e| engine_error(ctx, e))?;
            globals
                .set("__emits", emits.clone())
                .map_err(|e| engine_error(ctx, e))?;
            invoke(ctx, f, Some(doc), &[], None)?;
            let mut out = Vec::with_capacity(emits.len());
            let mut budget = 0;
            for item in emits.iter::<Value>() {
                let item = item.map_err(|e| engine_error(ctx, e))?;
                let Some(pair) = item.as_array() else {
                    continue;
                };
                let key: Value = pair.get(0).map_err(|e| engine_error(ctx, e))?;
                let value: Value = pair.get(1).map_err(|e| engine_error(ctx, e))?;
                out.push((
                    to_bson(&key, 0, &mut budget)?,
                    to_bson(&value, 0, &mut budget)?,
                ));
            }
            Ok(out)
        })
    }
}

// ---------------------------------------------------------------------------
// The engine of each thread

/// One operation's context on this thread, with its compiled functions.
/// Fields drop in order: the functions before their context.
struct ScopeContext {
    id: u64,
    functions: HashMap<usize, Persistent<Function<'static>>>,
    context: Context,
}

/// This thread's runtime and the contexts of recent scopes, most recent
/// last. Contexts drop before the runtime.
struct Engine {
    contexts: Vec<ScopeContext>,
    runtime: Runtime,
}

/// Why the interrupt handler stopped the script at hand.
#[derive(Default)]
struct Watch {
    deadline: Option<Instant>,
    stopped: Option<Error>,
}

thread_local! {
    static ENGINE: RefCell<Option<Engine>> = const { RefCell::new(None) };
    static WATCH: RefCell<Watch> = RefCell::new(Watch::default());
}

fn new_engine() -> Result<Engine> {
    let runtime =
        Runtime::new().map_err(|e| Error::internal(format!("JavaScript runtime: {e}")))?;
    runtime.set_memory_limit(MEMORY_BYTES.load(Ordering::Relaxed));
    runtime.set_max_stack_size(STACK_BYTES);
    runtime.set_interrupt_handler(Some(Box::new(should_interrupt)));
    Ok(Engine {
        contexts: Vec::new(),
        runtime,
    })
}

/// The engine's interrupt handler: true stops the running script.
fn should_interrupt() -> bool {
    WATCH.with(|w| {
        let mut w = w.borrow_mut();
        if w.stopped.is_some() {
            return true;
        }
        if w.deadline.is_some_and(|d| Instant::now() >= d) {
            w.stopped = Some(Error::new(
                ErrorCode::JSInterpreterFailure,
                format!(
                    "JavaScript execution terminated: it ran past the time limit of {} ms",
                    CALL_TIME_MS.load(Ordering::Relaxed)
                ),
            ));
            return true;
        }
        if let Some(op) = crate::query::interrupt::current() {
            if let Err(e) = op.check_now() {
                w.stopped = Some(e);
                return true;
            }
        }
        false
    })
}

/// Functions MongoDB's server gives its scripts, and the classes its BSON
/// types become. A prototype's hidden `__bsonType` says which type an
/// object converts back to.
const PRELUDE: &str = r#"
(function(g) {
  function hide(o, k, v) { Object.defineProperty(o, k, {value: v, enumerable: false, writable: true, configurable: true}); }
  function tag(C, t) { hide(C.prototype, '__bsonType', t); }
  function ObjectId(s) {
    if (!(this instanceof ObjectId)) return new ObjectId(s);
    if (s === undefined) { s = ''; for (var i = 0; i < 24; i++) s += Math.floor(Math.random() * 16).toString(16); }
    this.str = String(s);
  }
  ObjectId.prototype.toString = function() { return 'ObjectId("' + this.str + '")'; };
  ObjectId.prototype.toJSON = function() { return {$oid: this.str}; };
  ObjectId.prototype.valueOf = function() { return this.str; };
  ObjectId.prototype.equals = function(o) { return o instanceof ObjectId && o.str === this.str; };
  ObjectId.prototype.getTimestamp = function() { return new Date(parseInt(this.str.substr(0, 8), 16) * 1000); };
  tag(ObjectId, 'oid');
  function NumberLong(v) {
    if (!(this instanceof NumberLong)) return new NumberLong(v);
    var s = (typeof v === 'string') ? v : String(Math.trunc(Number(v === undefined ? 0 : v)));
    hide(this, '__v', s);
    this.floatApprox = Number(s);
  }
  NumberLong.prototype.valueOf = function() { return this.floatApprox; };
  NumberLong.prototype.toNumber = function() { return this.floatApprox; };
  NumberLong.prototype.toString = function() { return 'NumberLong(' + (Math.abs(this.floatApprox) <= 9007199254740991 ? this.__v : '"' + this.__v + '"') + ')'; };
  NumberLong.prototype.toJSON = function() { return {$numberLong: this.__v}; };
  tag(NumberLong, 'long');
  function NumberInt(v) {
    if (!(this instanceof NumberInt)) return new NumberInt(v);
    hide(this, '__v', Number(v === undefined ? 0 : v) | 0);
  }
  NumberInt.prototype.valueOf = function() { return this.__v; };
  NumberInt.prototype.toNumber = function() { return this.__v; };
  NumberInt.prototype.toString = function() { return 'NumberInt(' + this.__v + ')'; };
  NumberInt.prototype.toJSON = function() { return this.__v; };
  tag(NumberInt, 'int');
  function NumberDecimal(v) {
    if (!(this instanceof NumberDecimal)) return new NumberDecimal(v);
    hide(this, '__v', String(v === undefined ? '0' : v));
  }
  NumberDecimal.prototype.valueOf = function() { return Number(this.__v); };
  NumberDecimal.prototype.toString = function() { return 'NumberDecimal("' + this.__v + '")'; };
  NumberDecimal.prototype.toJSON = function() { return {$numberDecimal: this.__v}; };
  tag(NumberDecimal, 'decimal');
  function Timestamp(t, i) {
    if (!(this instanceof Timestamp)) return new Timestamp(t, i);
    this.t = t >>> 0; this.i = i >>> 0;
  }
  Timestamp.prototype.toString = function() { return 'Timestamp(' + this.t + ', ' + this.i + ')'; };
  Timestamp.prototype.getTime = function() { return this.t; };
  Timestamp.prototype.getInc = function() { return this.i; };
  tag(Timestamp, 'timestamp');
  function BinData(type, base64) {
    if (!(this instanceof BinData)) return new BinData(type, base64);
    this.type = type | 0; hide(this, '__v', String(base64));
  }
  BinData.prototype.base64 = function() { return this.__v; };
  BinData.prototype.toString = function() { return 'BinData(' + this.type + ',"' + this.__v + '")'; };
  tag(BinData, 'binary');
  function MinKey() { if (!(this instanceof MinKey)) return new MinKey(); }
  tag(MinKey, 'minKey');
  function MaxKey() { if (!(this instanceof MaxKey)) return new MaxKey(); }
  tag(MaxKey, 'maxKey');
  tag(Date, 'date');
  tag(RegExp, 'regex');
  g.ObjectId = ObjectId; g.NumberLong = NumberLong; g.NumberInt = NumberInt;
  g.NumberDecimal = NumberDecimal; g.Timestamp = Timestamp; g.BinData = BinData;
  g.MinKey = MinKey; g.MaxKey = MaxKey;
  g.ISODate = function(s) { return s === undefined ? new Date() : new Date(s); };
  Array.sum = function(a) { var s = 0; for (var i = 0; i < a.length; i++) s += a[i]; return s; };
  Array.avg = function(a) { return a.length ? Array.sum(a) / a.length : undefined; };
  Array.contains = function(a, x) { return a.indexOf(x) >= 0; };
  Array.unique = function(a) { var o = []; for (var i = 0; i < a.length; i++) if (o.indexOf(a[i]) < 0) o.push(a[i]); return o; };
  Array.shuffle = function(a) { return a; };
  Array.tojson = function(a) { return JSON.stringify(a); };
  g.isNumber = function(x) { return typeof x === 'number'; };
  g.isString = function(x) { return typeof x === 'string'; };
  g.isObject = function(x) { return typeof x === 'object' && x !== null; };
  g.tojson = function(x) { return JSON.stringify(x); };
  g.tojsononeline = g.tojson;
  g.print = function() {};
  g.printjson = function() {};
  g.sleep = function() {};
  g.emit = function(k, v) {
    if (arguments.length > 2) throw new Error('emit takes 2 args');
    g.__emits.push([k === undefined ? null : k, v]);
  };
  hide(g, '__emits', []);
})(globalThis);
"#;

fn eval_options() -> EvalOptions {
    let mut options = EvalOptions::default();
    options.strict = false;
    options
}

/// Runs `f` with `func` compiled in its scope's context on this thread,
/// under the time limit; a script that was stopped, ran out of memory
/// or left the runtime in doubt takes this thread's runtime with it.
fn with_function<R>(
    func: &JsFunction,
    f: impl for<'js> FnOnce(&Ctx<'js>, &Function<'js>) -> Result<R>,
) -> Result<R> {
    if !enabled() {
        return Err(function_disabled_error());
    }
    // The operation may already be over.
    if let Some(op) = crate::query::interrupt::current() {
        op.stopped()?;
    }
    let call_time = Duration::from_millis(CALL_TIME_MS.load(Ordering::Relaxed));
    WATCH.with(|w| {
        *w.borrow_mut() = Watch {
            deadline: Instant::now().checked_add(call_time),
            stopped: None,
        }
    });
    let result = ENGINE.with(|cell| -> Result<R> {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(new_engine()?);
        }
        let Some(engine) = slot.as_mut() else {
            return Err(Error::internal("no JavaScript engine"));
        };
        let at = match engine.contexts.iter().position(|c| c.id == func.scope.id) {
            Some(at) => at,
            None => {
                let context = new_context(&engine.runtime, &func.scope)?;
                if engine.contexts.len() >= CONTEXTS_PER_THREAD {
                    engine.contexts.remove(0);
                }
                engine.contexts.push(ScopeContext {
                    id: func.scope.id,
                    functions: HashMap::new(),
                    context,
                });
                engine.contexts.len() - 1
            }
        };
        // Most recently used last.
        let last = engine.contexts.len() - 1;
        engine.contexts.swap(at, last);
        let ScopeContext {
            functions, context, ..
        } = &mut engine.contexts[last];
        context.with(|ctx| -> Result<R> {
            let function = match functions.get(&func.index) {
                Some(p) => p.clone().restore(&ctx).map_err(|e| engine_error(&ctx, e))?,
                None => {
                    let compiled = compile(&ctx, func.source())?;
                    functions.insert(func.index, Persistent::save(&ctx, compiled.clone()));
                    compiled
                }
            };
            f(&ctx, &function)
        })
    });
    let stopped = WATCH.with(|w| {
        let mut w = w.borrow_mut();
        w.deadline = None;
        w.stopped.take()
    });
    let out_of_memory =
        matches!(&result, Err(e) if matches!(e.code, ErrorCode::ExceededMemoryLimit));
    if stopped.is_some() || out_of_memory {
        // A stopped script may have left its globals half-changed and the
        // heap near its limit: start this thread afresh.
        ENGINE.with(|cell| cell.borrow_mut().take());
    }
    match stopped {
        Some(reason) => Err(reason),
        None => result,
    }
}

fn new_context(runtime: &Runtime, scope: &JsScope) -> Result<Context> {
    let context =
        Context::full(runtime).map_err(|e| Error::internal(format!("JavaScript context: {e}")))?;
    context.with(|ctx| -> Result<()> {
        ctx.eval_with_options::<(), _>(PRELUDE, eval_options())
            .map_err(|e| engine_error(&ctx, e))?;
        let globals = ctx.globals();
        for (name, value) in &scope.globals {
            let v = to_js(&ctx, value)?;
            globals
                .set(name.as_str(), v)
                .map_err(|e| engine_error(&ctx, e))?;
        }
        Ok(())
    })?;
    Ok(context)
}

/// Compiles a function from MongoDB's forms: a function's source, or an
/// expression (its value is returned) or statements (their `return`).
fn compile<'js>(ctx: &Ctx<'js>, source: &str) -> Result<Function<'js>> {
    let trimmed = source.trim();
    let candidates = if trimmed.starts_with("function") || looks_like_arrow(trimmed) {
        vec![format!("({trimmed}\n)")]
    } else {
        vec![
            format!("(function() {{ return ({trimmed}\n); }})"),
            format!("(function() {{ {trimmed}\n }})"),
        ]
    };
    let mut last = None;
    for code in candidates {
        match ctx.eval_with_options::<Value, _>(code, eval_options()) {
            Ok(v) => {
                if let Some(f) = v.as_function() {
                    return Ok(f.clone());
                }
                last = Some(Error::new(
                    ErrorCode::JSInterpreterFailure,
                    "JavaScript code is not a function",
                ));
            }
            Err(e) => last = Some(engine_error(ctx, e)),
        }
    }
    Err(last.unwrap_or_else(|| Error::internal("no JavaScript candidate")))
}

fn looks_like_arrow(s: &str) -> bool {
    // `x => ...`, `(a, b) => ...`: an arrow before any body brace.
    match s.find("=>") {
        Some(at) => !s[..at].contains('{') && !s[..at].contains(';'),
        None => false,
    }
}

/// Calls `f` with `this` (a document, or undefined) and `args`; with
/// `obj`, sets the global `obj` first (`$where`).
fn invoke<'js>(
    ctx: &Ctx<'js>,
    f: &Function<'js>,
    this: Option<&Document>,
    args: &[Bson],
    obj: Option<&Document>,
) -> Result<Value<'js>> {
    let mut call = Args::new(ctx.clone(), args.len());
    let this_value = match this {
        Some(doc) => document_to_js(ctx, doc)?,
        None => Value::new_undefined(ctx.clone()),
    };
    if obj.is_some() {
        ctx.globals()
            .set("obj", this_value.clone())
            .map_err(|e| engine_error(ctx, e))?;
    }
    call.this(this_value).map_err(|e| engine_error(ctx, e))?;
    for a in args {
        let v = to_js(ctx, a)?;
        call.push_arg(v).map_err(|e| engine_error(ctx, e))?;
    }
    f.call_arg::<Value>(call).map_err(|e| engine_error(ctx, e))
}

/// JavaScript's truthiness.
fn js_truthy(v: &Value<'_>) -> bool {
    match v.type_of() {
        Type::Bool => v.as_bool().unwrap_or(false),
        Type::Int => v.as_int().is_some_and(|i| i != 0),
        Type::Float => v.as_float().is_some_and(|f| f != 0.0 && !f.is_nan()),
        Type::String => v
            .as_string()
            .is_some_and(|s| s.to_string().is_ok_and(|s| !s.is_empty())),
        Type::Undefined | Type::Null | Type::Uninitialized => false,
        Type::BigInt => v
            .as_big_int()
            .and_then(|b| b.clone().to_i64().ok())
            .is_none_or(|i| i != 0),
        _ => true,
    }
}

/// The error a failed engine call becomes: the pending exception as
/// MongoDB reports it (139 JSInterpreterFailure), or the reason the
/// interrupt handler stopped the script.
fn engine_error(ctx: &Ctx<'_>, e: rquickjs::Error) -> Error {
    if let Some(reason) = WATCH.with(|w| w.borrow().stopped.clone()) {
        // Clear the uncatchable "interrupted" exception.
        let _ = ctx.catch();
        return reason;
    }
    match e {
        rquickjs::Error::Exception => {
            let thrown = ctx.catch();
            let message = exception_message(&thrown);
            if message.contains("out of memory") {
                return out_of_memory();
            }
            Error::new(ErrorCode::JSInterpreterFailure, message)
        }
        rquickjs::Error::Allocation => out_of_memory(),
        other => Error::new(ErrorCode::JSInterpreterFailure, other.to_string()),
    }
}

fn out_of_memory() -> Error {
    Error::new(
        ErrorCode::ExceededMemoryLimit,
        format!(
            "Out of memory: JavaScript used more than the limit of {} MB",
            MEMORY_BYTES.load(Ordering::Relaxed) >> 20
        ),
    )
}

/// `Name: message :\nstack` for errors, as MongoDB words a script's
/// exception; `uncaught exception: value` for anything else thrown.
fn exception_message(thrown: &Value<'_>) -> String {
    if let Some(e) = thrown.as_exception() {
        let name: String = e
            .get::<_, Option<String>>("name")
            .ok()
            .flatten()
            .unwrap_or_else(|| "Error".to_string());
        let message = e.message().unwrap_or_default();
        let stack = e.stack().unwrap_or_default();
        let mut out = format!("{name}: {message}");
        if !stack.trim().is_empty() {
            out.push_str(" :\n");
            out.push_str(&stack);
        }
        return out;
    }
    let text = match thrown.type_of() {
        Type::String => thrown
            .as_string()
            .and_then(|s| s.to_string().ok())
            .unwrap_or_default(),
        _ => match to_bson(thrown, 0, &mut 0) {
            Ok(b) => b.to_string(),
            Err(_) => thrown.type_name().to_string(),
        },
    };
    format!("uncaught exception: {text}")
}

// ---------------------------------------------------------------------------
// BSON to JavaScript

fn document_to_js<'js>(ctx: &Ctx<'js>, doc: &Document) -> Result<Value<'js>> {
    let obj = Object::new(ctx.clone()).map_err(|e| engine_error(ctx, e))?;
    for (k, v) in doc {
        let v = to_js(ctx, v)?;
        obj.set(k.as_str(), v).map_err(|e| engine_error(ctx, e))?;
    }
    Ok(obj.into_value())
}

fn construct<'js>(ctx: &Ctx<'js>, class: &str, args: Vec<Value<'js>>) -> Result<Value<'js>> {
    let ctor: Constructor = ctx.globals().get(class).map_err(|e| engine_error(ctx, e))?;
    let mut call = Args::new(ctx.clone(), args.len());
    for a in args {
        call.push_arg(a).map_err(|e| engine_error(ctx, e))?;
    }
    call.construct::<Value>(&ctor)
        .map_err(|e| engine_error(ctx, e))
}

fn js_string<'js>(ctx: &Ctx<'js>, s: &str) -> Result<Value<'js>> {
    rquickjs::String::from_str(ctx.clone(), s)
        .map(|s| s.into_value())
        .map_err(|e| engine_error(ctx, e))
}

/// A BSON value as MongoDB's server gives it to a script.
pub(crate) fn to_js<'js>(ctx: &Ctx<'js>, value: &Bson) -> Result<Value<'js>> {
    let c = || ctx.clone();
    Ok(match value {
        Bson::Double(f) => Value::new_float(c(), *f),
        Bson::Int32(i) => Value::new_int(c(), *i),
        Bson::Int64(i) => construct(ctx, "NumberLong", vec![js_string(ctx, &i.to_string())?])?,
        Bson::String(s) => js_string(ctx, s)?,
        Bson::Boolean(b) => Value::new_bool(c(), *b),
        Bson::Null => Value::new_null(c()),
        Bson::Undefined => Value::new_undefined(c()),
        Bson::Document(d) => document_to_js(ctx, d)?,
        Bson::Array(items) => {
            let arr = Array::new(c()).map_err(|e| engine_error(ctx, e))?;
            for (i, item) in items.iter().enumerate() {
                let v = to_js(ctx, item)?;
                arr.set(i, v).map_err(|e| engine_error(ctx, e))?;
            }
            arr.into_value()
        }
        Bson::DateTime(d) => construct(
            ctx,
            "Date",
            vec![Value::new_float(c(), d.timestamp_millis() as f64)],
        )?,
        Bson::ObjectId(oid) => construct(ctx, "ObjectId", vec![js_string(ctx, &oid.to_hex())?])?,
        Bson::RegularExpression(re) => {
            let flags: String = re
                .options
                .as_str()
                .chars()
                .filter(|ch| matches!(ch, 'i' | 'm' | 's' | 'u'))
                .collect();
            construct(
                ctx,
                "RegExp",
                vec![
                    js_string(ctx, re.pattern.as_str())?,
                    js_string(ctx, &flags)?,
                ],
            )?
        }
        Bson::Timestamp(ts) => construct(
            ctx,
            "Timestamp",
            vec![
                Value::new_float(c(), f64::from(ts.time)),
                Value::new_float(c(), f64::from(ts.increment)),
            ],
        )?,
        Bson::Decimal128(d) => {
            construct(ctx, "NumberDecimal", vec![js_string(ctx, &d.to_string())?])?
        }
        Bson::Binary(b) => construct(
            ctx,
            "BinData",
            vec![
                Value::new_int(c(), i32::from(u8::from(b.subtype))),
                js_string(ctx, &base64_encode(&b.bytes))?,
            ],
        )?,
        Bson::MinKey => construct(ctx, "MinKey", vec![])?,
        Bson::MaxKey => construct(ctx, "MaxKey", vec![])?,
        Bson::JavaScriptCode(code) => js_string(ctx, code)?,
        Bson::JavaScriptCodeWithScope(code) => js_string(ctx, &code.code)?,
        Bson::Symbol(s) => js_string(ctx, s)?,
        Bson::DbPointer(_) => Value::new_null(c()),
    })
}

// ---------------------------------------------------------------------------
// JavaScript to BSON

/// Bytes a value converted from JavaScript may take (a BSON document's
/// limit).
const MAX_CONVERTED_BYTES: usize = crate::base::limits::MAX_BSON_OBJECT_SIZE;

fn conversion_error(message: impl Into<String>) -> Error {
    Error::new(ErrorCode::JSInterpreterFailure, message)
}

fn charge(budget: &mut usize, bytes: usize) -> Result<()> {
    *budget = budget.saturating_add(bytes);
    if *budget > MAX_CONVERTED_BYTES {
        return Err(Error::new(
            ErrorCode::BSONObjectTooLarge,
            format!("Converting from JavaScript to BSON failed: Object size exceeds limit of {MAX_CONVERTED_BYTES} bytes."),
        ));
    }
    Ok(())
}

fn js_err(e: rquickjs::Error) -> Error {
    conversion_error(format!("Converting from JavaScript to BSON failed: {e}"))
}

/// A script's value as MongoDB's server stores it.
pub(crate) fn to_bson(value: &Value<'_>, depth: usize, budget: &mut usize) -> Result<Bson> {
    if depth > MAX_DEPTH {
        return Err(conversion_error(format!(
            "Converting from JavaScript to BSON failed: Object depth exceeds the limit of {MAX_DEPTH}; is there a cycle?"
        )));
    }
    charge(budget, 16)?;
    Ok(match value.type_of() {
        Type::Undefined | Type::Uninitialized | Type::Null => Bson::Null,
        Type::Bool => Bson::Boolean(value.as_bool().unwrap_or(false)),
        Type::Int => Bson::Double(f64::from(value.as_int().unwrap_or(0))),
        Type::Float => Bson::Double(value.as_float().unwrap_or(f64::NAN)),
        Type::String => {
            let s = value
                .as_string()
                .map(|s| s.to_string())
                .transpose()
                .map_err(js_err)?
                .unwrap_or_default();
            charge(budget, s.len())?;
            Bson::String(s)
        }
        Type::BigInt => {
            let i = value
                .as_big_int()
                .and_then(|b| b.clone().to_i64().ok())
                .ok_or_else(|| conversion_error("BigInt out of the range of a 64-bit integer"))?;
            Bson::Int64(i)
        }
        Type::Symbol => Bson::Null,
        Type::Function | Type::Constructor => {
            let text = value
                .as_object()
                .and_then(|o| o.get::<_, Function>("toString").ok())
                .and_then(|f| {
                    f.call::<_, String>((rquickjs::function::This(value.clone()),))
                        .ok()
                })
                .unwrap_or_default();
            Bson::JavaScriptCode(text)
        }
        Type::Array => {
            let arr = value
                .as_array()
                .ok_or_else(|| conversion_error("not an array"))?;
            let mut out = Vec::with_capacity(arr.len());
            for item in arr.iter::<Value>() {
                out.push(to_bson(&item.map_err(js_err)?, depth + 1, budget)?);
            }
            Bson::Array(out)
        }
        _ => {
            let obj = value.as_object().ok_or_else(|| {
                conversion_error(format!("cannot convert a {}", value.type_name()))
            })?;
            let tag: Option<String> = obj.get("__bsonType").map_err(js_err)?;
            match tag.as_deref() {
                Some(t) => special_to_bson(obj, t)?,
                None => {
                    let mut out = Document::new();
                    for prop in obj.props::<String, Value>() {
                        let (k, v) = prop.map_err(js_err)?;
                        if v.is_function() {
                            // Methods are not data (MongoDB drops them too).
                            continue;
                        }
                        charge(budget, k.len())?;
                        out.insert(k, to_bson(&v, depth + 1, budget)?);
                    }
                    Bson::Document(out)
                }
            }
        }
    })
}

fn special_to_bson(obj: &Object<'_>, tag: &str) -> Result<Bson> {
    let text = |key: &str| -> Result<String> {
        let v: Value = obj.get(key).map_err(js_err)?;
        match v.type_of() {
            Type::String => v
                .as_string()
                .map(|s| s.to_string())
                .transpose()
                .map_err(js_err)
                .map(Option::unwrap_or_default),
            Type::Int => Ok(v.as_int().unwrap_or(0).to_string()),
            Type::Float => Ok(format!("{}", v.as_float().unwrap_or(0.0))),
            _ => Ok(String::new()),
        }
    };
    let number = |key: &str| -> f64 {
        obj.get::<_, Value>(key)
            .ok()
            .and_then(|v| v.as_number())
            .unwrap_or(0.0)
    };
    let call = |method: &str| -> Result<Value<'_>> {
        let f: Function = obj.get(method).map_err(js_err)?;
        f.call((rquickjs::function::This(obj.clone()),))
            .map_err(js_err)
    };
    Ok(match tag {
        "oid" => {
            let s = text("str")?;
            Bson::ObjectId(
                ObjectId::parse_str(&s)
                    .map_err(|_| conversion_error(format!("invalid ObjectId: {s}")))?,
            )
        }
        "long" => {
            let s = text("__v")?;
            Bson::Int64(s.parse::<i64>().or_else(|_| {
                s.parse::<f64>()
                    .map(|f| f as i64)
                    .map_err(|_| conversion_error(format!("invalid NumberLong: {s}")))
            })?)
        }
        "int" => Bson::Int32(number("__v") as i32),
        "decimal" => {
            let s = text("__v")?;
            Bson::Decimal128(
                s.parse::<Decimal128>()
                    .map_err(|_| conversion_error(format!("invalid NumberDecimal: {s}")))?,
            )
        }
        "timestamp" => Bson::Timestamp(Timestamp {
            time: number("t") as u32,
            increment: number("i") as u32,
        }),
        "binary" => {
            let bytes = base64_decode(&text("__v")?)
                .ok_or_else(|| conversion_error("invalid BinData base64"))?;
            Bson::Binary(Binary {
                subtype: BinarySubtype::from(number("type") as u8),
                bytes,
            })
        }
        "minKey" => Bson::MinKey,
        "maxKey" => Bson::MaxKey,
        "date" => {
            let ms = call("getTime")?.as_number().unwrap_or(f64::NAN);
            if ms.is_nan() {
                // An invalid date: MongoDB stores the earliest date.
                Bson::DateTime(DateTime::from_millis(i64::MIN))
            } else {
                Bson::DateTime(DateTime::from_millis(ms as i64))
            }
        }
        "regex" => {
            let pattern = text("source")?;
            let mut flags: Vec<char> = text("flags")?
                .chars()
                .filter(|c| matches!(c, 'i' | 'm' | 's' | 'u'))
                .collect();
            flags.sort_unstable();
            let options: String = flags.into_iter().collect();
            let bad = |_| conversion_error("a regular expression holds a null byte");
            Bson::RegularExpression(Regex {
                pattern: pattern.try_into().map_err(bad)?,
                options: options.try_into().map_err(bad)?,
            })
        }
        _ => Bson::Null,
    })
}

// ---------------------------------------------------------------------------
// Base64, for BinData.

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(BASE64[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in text.bytes() {
        if c == b'=' {
            break;
        }
        let v = BASE64.iter().position(|&b| b == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn where_style_functions_see_this_and_obj() {
        let f = JsFunction::new("this.a > 1 && obj.a < 5").unwrap();
        assert!(f.call_predicate(&doc! {"a": 2}).unwrap());
        assert!(!f.call_predicate(&doc! {"a": 7}).unwrap());
        let g = JsFunction::new("function() { return this.name == 'x'; }").unwrap();
        assert!(g.call_predicate(&doc! {"name": "x"}).unwrap());
        let h = JsFunction::new("var n = this.a; return n === 3;").unwrap();
        assert!(h.call_predicate(&doc! {"a": 3}).unwrap());
    }

    #[test]
    fn numbers_come_back_as_doubles_and_longs_stay_longs() {
        let f = JsFunction::new("function(v) { return v * 2; }").unwrap();
        assert_eq!(f.call(None, &[Bson::Int32(3)]).unwrap(), Bson::Double(6.0));
        let id = JsFunction::new("function(v) { return v; }").unwrap();
        for v in [
            Bson::Int64(1 << 60),
            Bson::Int32(7),
            Bson::String("s".into()),
            Bson::Boolean(true),
            Bson::Null,
            Bson::DateTime(DateTime::from_millis(1_700_000_000_123)),
            Bson::ObjectId(ObjectId::parse_str("65a1b2c3d4e5f60718293a4b").unwrap()),
            Bson::Decimal128("1.5".parse().unwrap()),
            Bson::Timestamp(Timestamp {
                time: 5,
                increment: 6,
            }),
            Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes: vec![0, 1, 2, 250, 255],
            }),
            Bson::RegularExpression(Regex {
                pattern: "^a".to_string().try_into().unwrap(),
                options: "i".to_string().try_into().unwrap(),
            }),
            Bson::Document(doc! {"x": {"y": [1.5, "z"]}}),
        ] {
            let expected = match &v {
                Bson::Int32(i) => Bson::Double(f64::from(*i)),
                Bson::Document(_) => Bson::Document(doc! {"x": {"y": [1.5, "z"]}}),
                other => other.clone(),
            };
            assert_eq!(
                id.call(None, std::slice::from_ref(&v)).unwrap(),
                expected,
                "{v:?}"
            );
        }
    }

    #[test]
    fn object_ids_have_str_and_to_string() {
        let f =
            JsFunction::new("function(o) { return [o.str, o.toString(), String(o)]; }").unwrap();
        let oid = ObjectId::parse_str("65a1b2c3d4e5f60718293a4b").unwrap();
        assert_eq!(
            f.call(None, &[Bson::ObjectId(oid)]).unwrap(),
            Bson::Array(vec![
                "65a1b2c3d4e5f60718293a4b".into(),
                "ObjectId(\"65a1b2c3d4e5f60718293a4b\")".into(),
                "ObjectId(\"65a1b2c3d4e5f60718293a4b\")".into(),
            ])
        );
    }

    #[test]
    fn exceptions_are_js_interpreter_failures() {
        let f = JsFunction::new("function() { return nope.x; }").unwrap();
        let e = f.call(None, &[]).unwrap_err();
        assert_eq!(e.code, ErrorCode::JSInterpreterFailure);
        assert!(e.message.contains("ReferenceError"), "{}", e.message);
        let g = JsFunction::new("function() { throw 'boom'; }").unwrap();
        let e = g.call(None, &[]).unwrap_err();
        assert!(
            e.message.contains("uncaught exception: boom"),
            "{}",
            e.message
        );
        let bad = JsFunction::new("function( {").unwrap();
        assert_eq!(
            bad.check().unwrap_err().code,
            ErrorCode::JSInterpreterFailure
        );
    }

    #[test]
    fn runaway_scripts_stop_and_the_thread_runs_the_next() {
        configure(Limits {
            enabled: true,
            call_time: Duration::from_millis(200),
            memory_bytes: DEFAULT_MEMORY_BYTES,
        });
        let spin = JsFunction::new("function() { while (true) {} }").unwrap();
        let started = Instant::now();
        let e = spin.call(None, &[]).unwrap_err();
        assert_eq!(e.code, ErrorCode::JSInterpreterFailure);
        assert!(e.message.contains("time limit"), "{}", e.message);
        assert!(started.elapsed() < Duration::from_secs(3));
        let hog = JsFunction::new(
            "function() { var a = []; while (true) a.push(new Array(100000).fill(1)); }",
        )
        .unwrap();
        let e = hog.call(None, &[]).unwrap_err();
        assert_eq!(e.code, ErrorCode::ExceededMemoryLimit, "{}", e.message);
        let deep = JsFunction::new("function f() { return f() + 1; }").unwrap();
        let e = deep.call(None, &[]).unwrap_err();
        assert_eq!(e.code, ErrorCode::JSInterpreterFailure, "{}", e.message);
        let ok = JsFunction::new("function() { return 1; }").unwrap();
        assert_eq!(ok.call(None, &[]).unwrap(), Bson::Double(1.0));
        configure(Limits {
            enabled: true,
            call_time: Duration::from_millis(DEFAULT_CALL_TIME_MS),
            memory_bytes: DEFAULT_MEMORY_BYTES,
        });
    }

    #[test]
    fn an_operation_time_limit_interrupts_a_script() {
        let op = crate::query::interrupt::Operation::new(
            Some(Instant::now() + Duration::from_millis(100)),
            None,
        );
        let _in = crate::query::interrupt::enter(Some(op));
        let spin = JsFunction::new("function() { while (true) {} }").unwrap();
        assert_eq!(
            spin.call(None, &[]).unwrap_err().code,
            ErrorCode::MaxTimeMSExpired
        );
    }

    #[test]
    fn scopes_keep_their_globals_apart() {
        let mut b = ScopeBuilder::new(doc! {"k": 10});
        let set = b.add("function() { counter = (typeof counter == 'undefined' ? 0 : counter) + k; return counter; }");
        let fs = b.finish();
        assert_eq!(fs[set].call(None, &[]).unwrap(), Bson::Double(10.0));
        assert_eq!(fs[set].call(None, &[]).unwrap(), Bson::Double(20.0));
        let other = JsFunction::new("function() { return typeof counter; }").unwrap();
        assert_eq!(
            other.call(None, &[]).unwrap(),
            Bson::String("undefined".into())
        );
    }

    #[test]
    fn map_functions_emit_pairs() {
        let f = JsFunction::new("function() { emit(this.k, this.v); emit('all', 1); }").unwrap();
        assert_eq!(
            f.call_map(&doc! {"k": "a", "v": 2}).unwrap(),
            vec![
                (Bson::String("a".into()), Bson::Double(2.0)),
                (Bson::String("all".into()), Bson::Double(1.0)),
            ]
        );
    }

    #[test]
    fn cycles_fail_to_convert() {
        let f = JsFunction::new("function() { var a = {}; a.self = a; return a; }").unwrap();
        assert!(f.call(None, &[]).is_err());
    }

    #[test]
    fn base64_round_trips() {
        for bytes in [&b""[..], b"a", b"ab", b"abc", b"abcd", &[0, 255, 128, 7]] {
            assert_eq!(base64_decode(&base64_encode(bytes)).unwrap(), bytes);
        }
        assert_eq!(base64_encode(b"hello"), "aGVsbG8=");
    }
}
