//! Full-text search, as MongoDB 7.0's text indexes (`textIndexVersion`
//! 3) do it: pure logic, no I/O.
//!
//! - [`TextSpec`]: a text index's options (weights, wildcard, default
//!   language, language override) and the terms a document gives it, each
//!   with its score ([`TextSpec::score_document`], MongoDB's
//!   `FTSSpec::scoreDocument`).
//! - [`terms`]: words (Unicode word boundaries, UAX #29), case-folded
//!   and stripped of diacritics unless asked not to, stop words dropped,
//!   stemmed by the language's Snowball stemmer.
//! - [`TextQuery`]: a parsed `$search` string (terms, negated terms,
//!   phrases, negated phrases) and whether a document matches it.
//!
//! A term's score in one field is `weight × freq × coeff × adjustment`:
//! the k-th occurrence of a term adds `1/2^(k-1)` to `freq`, `coeff` is
//! `0.5 × count / tokens + 0.5` (the share of the field's non-stop-word
//! tokens that are this term), and `adjustment` is 1.1 when the whole
//! field equals the term, else 1. A document's score for a query is the
//! sum of its scores for the query's distinct positive terms.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use bson::{Bson, Document};
use rust_stemmers::{Algorithm, Stemmer};
use unicode_normalization::char::is_combining_mark;
use unicode_normalization::UnicodeNormalization;
use unicode_segmentation::UnicodeSegmentation;

use crate::error::{Error, ErrorCode, Result};

/// The text index version this server builds.
pub const TEXT_INDEX_VERSION: i32 = 3;
/// The language of documents that name none.
pub const DEFAULT_LANGUAGE: &str = "english";
/// The document field that names a document's language.
pub const DEFAULT_LANGUAGE_OVERRIDE: &str = "language";
/// The name of the term field in a text index's key pattern.
pub const TERM_FIELD: &str = "_fts";
/// The weight path that indexes every string field.
pub const WILDCARD: &str = "$**";
/// The most stems a thread keeps ([`Language::stem`]); past it the cache
/// starts again (about 4 MB at 64 bytes a word).
const STEM_CACHE_WORDS: usize = 65_536;
/// A field weight must be below this (MongoDB's `MAX_WORD_WEIGHT`).
const MAX_WORD_WEIGHT: i64 = 100_000;

/// A language text indexes stem and drop stop words for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Language {
    /// No stemming, no stop words.
    #[default]
    None,
    Danish,
    Dutch,
    English,
    Finnish,
    French,
    German,
    Hungarian,
    Italian,
    Norwegian,
    Portuguese,
    Romanian,
    Russian,
    Spanish,
    Swedish,
    Turkish,
}

/// Each language's name and ISO 639-1 code, as MongoDB accepts them.
const LANGUAGES: [(&str, &str, Language); 16] = [
    ("none", "none", Language::None),
    ("danish", "da", Language::Danish),
    ("dutch", "nl", Language::Dutch),
    ("english", "en", Language::English),
    ("finnish", "fi", Language::Finnish),
    ("french", "fr", Language::French),
    ("german", "de", Language::German),
    ("hungarian", "hu", Language::Hungarian),
    ("italian", "it", Language::Italian),
    ("norwegian", "nb", Language::Norwegian),
    ("portuguese", "pt", Language::Portuguese),
    ("romanian", "ro", Language::Romanian),
    ("russian", "ru", Language::Russian),
    ("spanish", "es", Language::Spanish),
    ("swedish", "sv", Language::Swedish),
    ("turkish", "tr", Language::Turkish),
];

impl Language {
    /// A language by name or code, in any case.
    pub fn parse(name: &str) -> Option<Language> {
        let lower = name.to_lowercase();
        LANGUAGES
            .iter()
            .find(|(n, code, _)| *n == lower || *code == lower)
            .map(|(_, _, l)| *l)
    }

    fn algorithm(self) -> Option<Algorithm> {
        Some(match self {
            Language::None => return None,
            Language::Danish => Algorithm::Danish,
            Language::Dutch => Algorithm::Dutch,
            Language::English => Algorithm::English,
            Language::Finnish => Algorithm::Finnish,
            Language::French => Algorithm::French,
            Language::German => Algorithm::German,
            Language::Hungarian => Algorithm::Hungarian,
            Language::Italian => Algorithm::Italian,
            Language::Norwegian => Algorithm::Norwegian,
            Language::Portuguese => Algorithm::Portuguese,
            Language::Romanian => Algorithm::Romanian,
            Language::Russian => Algorithm::Russian,
            Language::Spanish => Algorithm::Spanish,
            Language::Swedish => Algorithm::Swedish,
            Language::Turkish => Algorithm::Turkish,
        })
    }

    /// The word's stem (the word itself for `none`). Stems are kept per
    /// thread, up to [`STEM_CACHE_WORDS`]: text repeats its words, and
    /// scoring a document at query time stems all of its words again.
    pub fn stem(self, word: &str) -> String {
        static STEMMERS: OnceLock<HashMap<Language, Stemmer>> = OnceLock::new();
        thread_local! {
            /// Stems by word, one map per language.
            static STEMS: std::cell::RefCell<[HashMap<String, String>; LANGUAGES.len()]> =
                std::cell::RefCell::new(std::array::from_fn(|_| HashMap::new()));
        }
        let stemmers = STEMMERS.get_or_init(|| {
            LANGUAGES
                .iter()
                .filter_map(|(_, _, l)| l.algorithm().map(|a| (*l, Stemmer::create(a))))
                .collect()
        });
        let Some(stemmer) = stemmers.get(&self) else {
            return word.to_string();
        };
        STEMS.with(|caches| {
            let mut caches = caches.borrow_mut();
            let Some(cache) = caches.get_mut(self as usize) else {
                return stemmer.stem(word).into_owned();
            };
            if let Some(stem) = cache.get(word) {
                return stem.clone();
            }
            if cache.len() >= STEM_CACHE_WORDS {
                cache.clear();
            }
            let stem = stemmer.stem(word).into_owned();
            cache.insert(word.to_string(), stem.clone());
            stem
        })
    }

    /// The language's stop-word list: MongoDB's own for English, the
    /// Snowball project's (as NLTK distributes them) for the others.
    fn stop_word_list(self) -> &'static [&'static str] {
        static ENGLISH: OnceLock<Vec<&'static str>> = OnceLock::new();
        let code = match self {
            Language::None => return &[],
            Language::English => {
                return ENGLISH
                    .get_or_init(|| include_str!("stop_words/english.txt").lines().collect())
            }
            Language::Danish => "da",
            Language::Dutch => "nl",
            Language::Finnish => "fi",
            Language::French => "fr",
            Language::German => "de",
            Language::Hungarian => "hu",
            Language::Italian => "it",
            Language::Norwegian => "no",
            Language::Portuguese => "pt",
            Language::Romanian => "ro",
            Language::Russian => "ru",
            Language::Spanish => "es",
            Language::Swedish => "sv",
            Language::Turkish => "tr",
        };
        stop_words::get(code)
    }

    /// True for a word (lower case) the language does not index. Words
    /// and list are compared without diacritics, so `"été"` and `"ete"`
    /// are both French stop words.
    pub fn is_stop_word(self, word: &str) -> bool {
        static SETS: OnceLock<HashMap<Language, HashSet<String>>> = OnceLock::new();
        let sets = SETS.get_or_init(|| {
            LANGUAGES
                .iter()
                .map(|(_, _, l)| {
                    let words = l
                        .stop_word_list()
                        .iter()
                        .map(|w| fold(w, Sensitivity::default()))
                        .collect();
                    (*l, words)
                })
                .collect()
        });
        let Some(set) = sets.get(&self).filter(|set| !set.is_empty()) else {
            return false;
        };
        if word.is_ascii() {
            set.contains(word)
        } else {
            set.contains(&fold(word, Sensitivity::default()))
        }
    }
}

/// Case and diacritic handling of a tokenization.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sensitivity {
    pub case: bool,
    pub diacritic: bool,
}

/// The word as compared: lower case unless case-sensitive, without
/// diacritics (combining marks after canonical decomposition) unless
/// diacritic-sensitive.
pub fn fold(word: &str, sensitivity: Sensitivity) -> String {
    // ASCII has no diacritics to take off.
    if word.is_ascii() {
        return if sensitivity.case {
            word.to_string()
        } else {
            word.to_ascii_lowercase()
        };
    }
    let cased = if sensitivity.case {
        word.to_string()
    } else {
        word.to_lowercase()
    };
    if sensitivity.diacritic {
        cased
    } else {
        cased
            .nfd()
            .filter(|c| !is_combining_mark(*c))
            .nfc()
            .collect()
    }
}

/// The terms of `text` in `language`, in order: its words folded, stop
/// words dropped, stemmed.
pub fn terms(text: &str, language: Language, sensitivity: Sensitivity) -> Vec<String> {
    text.unicode_words()
        .filter_map(|word| {
            let folded = fold(word, sensitivity);
            let lower = if sensitivity.case {
                folded.to_lowercase()
            } else {
                folded.clone()
            };
            (!language.is_stop_word(&lower)).then(|| language.stem(&folded))
        })
        .collect()
}

/// A text index's options.
#[derive(Debug, Clone, PartialEq)]
pub struct TextSpec {
    /// The weight of each indexed path, by path (as MongoDB lists them);
    /// with the wildcard, the weights of paths that differ from 1.
    pub weights: BTreeMap<String, i32>,
    /// `"$**"`: every string field is indexed.
    pub wildcard: bool,
    /// `default_language` as given (it is shown as given).
    pub default_language: String,
    pub language: Language,
    pub language_override: String,
}

fn location(code: i32, message: impl Into<String>) -> Error {
    Error::new(ErrorCode::Location(code), message)
}

impl TextSpec {
    /// The options of a text index whose key pattern names `fields` as
    /// `"text"`, from the rest of its specification: `weights`,
    /// `default_language`, `language_override`, `textIndexVersion`.
    pub fn parse(fields: &[String], spec: &Document) -> Result<TextSpec> {
        let mut weights: BTreeMap<String, i32> = BTreeMap::new();
        let mut wildcard = false;
        for field in fields {
            if field == WILDCARD {
                wildcard = true;
            } else {
                weights.insert(field.clone(), 1);
            }
        }
        match spec.get("weights") {
            None => {}
            Some(Bson::Document(given)) => {
                for (path, weight) in given {
                    let weight = match weight {
                        Bson::Int32(n) => *n as i64,
                        Bson::Int64(n) => *n,
                        Bson::Double(f) if f.is_finite() => f.trunc() as i64,
                        Bson::Double(_) => 0,
                        Bson::Decimal128(_) => crate::query::compare::Number::of(weight)
                            .map_or(0, |n| n.to_f64().trunc() as i64),
                        _ => {
                            return Err(location(17283, "weight for text index needs numeric type"))
                        }
                    };
                    if weight <= 0 || weight >= MAX_WORD_WEIGHT {
                        return Err(location(16674, "score for word too high"));
                    }
                    if path == WILDCARD {
                        wildcard = true;
                        continue;
                    }
                    if path.is_empty() {
                        return Err(location(17294, "weight cannot be on an empty field"));
                    }
                    for part in path.split('.') {
                        if part.is_empty() {
                            return Err(location(17291, "weight cannot have empty path component"));
                        }
                        if part.starts_with('$') {
                            return Err(location(
                                17292,
                                "weight cannot have path component with $ prefix",
                            ));
                        }
                    }
                    weights.insert(path.clone(), weight as i32);
                }
            }
            Some(Bson::String(s)) if s == WILDCARD => wildcard = true,
            Some(_) => {
                return Err(location(
                    17284,
                    "text index option 'weights' must be an object",
                ))
            }
        }
        let default_language = match spec.get("default_language") {
            None => DEFAULT_LANGUAGE.to_string(),
            Some(Bson::String(s)) => s.clone(),
            Some(_) => return Err(location(17263, "default_language needs a string type")),
        };
        let Some(language) = Language::parse(&default_language) else {
            return Err(location(
                17264,
                format!("default_language is not valid: {default_language}"),
            ));
        };
        let language_override = match spec.get("language_override") {
            None => DEFAULT_LANGUAGE_OVERRIDE.to_string(),
            Some(Bson::String(s)) if !s.is_empty() && !s.starts_with('$') && !s.contains('.') => {
                s.clone()
            }
            Some(_) => return Err(location(17136, "language_override is not valid")),
        };
        match spec.get("textIndexVersion") {
            None => {}
            Some(v) => match crate::query::compare::Number::of(v).map(|n| n.to_f64()) {
                Some(n) if n == TEXT_INDEX_VERSION as f64 => {}
                Some(n) => {
                    return Err(location(
                        17364,
                        format!(
                            "attempt to use unsupported textIndexVersion {n}; versions supported: 3"
                        ),
                    ))
                }
                None => {
                    return Err(location(
                        17293,
                        "text index option 'textIndexVersion' must be a number",
                    ))
                }
            },
        }
        Ok(TextSpec {
            weights,
            wildcard,
            default_language,
            language,
            language_override,
        })
    }

    /// The options as `listIndexes` shows them, after the key.
    pub fn options(&self) -> Document {
        let mut weights = Document::new();
        if self.wildcard {
            weights.insert(WILDCARD, 1);
        }
        for (path, weight) in &self.weights {
            weights.insert(path.clone(), *weight);
        }
        bson::doc! {
            "weights": weights,
            "default_language": self.default_language.clone(),
            "language_override": self.language_override.clone(),
            "textIndexVersion": TEXT_INDEX_VERSION,
        }
    }

    /// The language `doc` is written in: its override field, else the
    /// index's default. A language it names that is not supported is an
    /// error (MongoDB's 17262), as is a non-string (17261).
    pub fn language_of(&self, doc: &Document) -> Result<Language> {
        match doc.get(&self.language_override) {
            None => Ok(self.language),
            Some(Bson::String(name)) => Language::parse(name)
                .ok_or_else(|| location(17262, format!("language override unsupported: {name}"))),
            Some(_) => Err(location(
                17261,
                "found language override field in document with non-string type",
            )),
        }
    }

    /// Every indexed string of `doc` with its weight.
    pub fn strings<'a>(&self, doc: &'a Document) -> Vec<(&'a str, f64)> {
        let mut out = Vec::new();
        if self.wildcard {
            collect_all(doc, "", &self.weights, &mut out);
        } else {
            for (path, weight) in &self.weights {
                let parts: Vec<&str> = path.split('.').collect();
                collect_path(doc, &parts, *weight as f64, &mut out);
            }
        }
        out
    }

    /// The terms `doc` gives the index, each with its score
    /// (`FTSSpec::scoreDocument`), sorted by term.
    pub fn score_document(&self, doc: &Document) -> Result<BTreeMap<String, f64>> {
        let language = self.language_of(doc)?;
        let mut scores = BTreeMap::new();
        for (text, weight) in self.strings(doc) {
            score_string(text, weight, language, &mut scores);
        }
        Ok(scores)
    }
}

/// Adds one string's term scores to `scores`.
fn score_string(raw: &str, weight: f64, language: Language, scores: &mut BTreeMap<String, f64>) {
    struct Seen {
        count: u32,
        exp: f64,
        freq: f64,
    }
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    let mut tokens = 0u32;
    for term in terms(raw, language, Sensitivity::default()) {
        let s = seen.entry(term).or_insert(Seen {
            count: 0,
            exp: 0.0,
            freq: 0.0,
        });
        s.exp = if s.exp == 0.0 { 1.0 } else { s.exp * 2.0 };
        s.count += 1;
        s.freq += 1.0 / s.exp;
        tokens += 1;
    }
    for (term, s) in seen {
        let coeff = 0.5 * s.count as f64 / tokens as f64 + 0.5;
        let adjustment = if raw.len() == term.len() && raw.eq_ignore_ascii_case(&term) {
            1.1
        } else {
            1.0
        };
        *scores.entry(term).or_insert(0.0) += weight * s.freq * coeff * adjustment;
    }
}

/// Strings under a dotted path, through arrays.
fn collect_path<'a>(doc: &'a Document, parts: &[&str], weight: f64, out: &mut Vec<(&'a str, f64)>) {
    let Some((first, rest)) = parts.split_first() else {
        return;
    };
    if let Some(v) = doc.get(*first) {
        collect_value(v, rest, weight, out);
    }
}

fn collect_value<'a>(v: &'a Bson, rest: &[&str], weight: f64, out: &mut Vec<(&'a str, f64)>) {
    match v {
        Bson::String(s) if rest.is_empty() => out.push((s, weight)),
        Bson::Document(d) if !rest.is_empty() => collect_path(d, rest, weight, out),
        Bson::Array(items) => {
            for item in items {
                collect_value(item, rest, weight, out);
            }
        }
        _ => {}
    }
}

/// Every string of a document (the wildcard), weighted by its path.
fn collect_all<'a>(
    doc: &'a Document,
    prefix: &str,
    weights: &BTreeMap<String, i32>,
    out: &mut Vec<(&'a str, f64)>,
) {
    for (name, v) in doc {
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        collect_all_value(v, &path, weights, out);
    }
}

fn collect_all_value<'a>(
    v: &'a Bson,
    path: &str,
    weights: &BTreeMap<String, i32>,
    out: &mut Vec<(&'a str, f64)>,
) {
    match v {
        Bson::String(s) => out.push((s, weights.get(path).map_or(1.0, |w| *w as f64))),
        Bson::Document(d) => collect_all(d, path, weights, out),
        Bson::Array(items) => {
            for item in items {
                collect_all_value(item, path, weights, out);
            }
        }
        _ => {}
    }
}

/// The arguments of `$text`.
#[derive(Debug, Clone, PartialEq)]
pub struct TextArgs {
    pub search: String,
    /// `$language`, when given.
    pub language: Option<Language>,
    pub sensitivity: Sensitivity,
}

/// MongoDB's error for a `$text` argument of the wrong type.
fn wrong_type(field: &str, expected: &str, value: &Bson) -> Error {
    Error::new(
        ErrorCode::TypeMismatch,
        format!(
            "{field} had the wrong type. Expected {expected}, found {}",
            crate::query::compare::type_name(value)
        ),
    )
}

impl TextArgs {
    /// Parses `{$search, $language, $caseSensitive, $diacriticSensitive}`.
    pub fn parse(value: &Bson) -> Result<TextArgs> {
        let Bson::Document(d) = value else {
            crate::bail!(BadValue, "$text expects an object");
        };
        let mut search = None;
        let mut language = None;
        let mut sensitivity = Sensitivity::default();
        for (key, v) in d {
            match key.as_str() {
                "$search" => match v {
                    Bson::String(s) => search = Some(s.clone()),
                    _ => return Err(wrong_type(key, "string", v)),
                },
                "$language" => match v {
                    Bson::String(s) => {
                        language = Some(Language::parse(s).ok_or_else(|| {
                            Error::new(
                                ErrorCode::BadValue,
                                format!("unsupported language: \"{s}\" for text index version 3"),
                            )
                        })?)
                    }
                    _ => return Err(wrong_type(key, "string", v)),
                },
                "$caseSensitive" => match v {
                    Bson::Boolean(b) => sensitivity.case = *b,
                    _ => return Err(wrong_type(key, "bool", v)),
                },
                "$diacriticSensitive" => match v {
                    Bson::Boolean(b) => sensitivity.diacritic = *b,
                    _ => return Err(wrong_type(key, "bool", v)),
                },
                other => crate::bail!(BadValue, "unknown operator: {other}"),
            }
        }
        let Some(search) = search else {
            crate::bail!(FailedToParse, "$search required");
        };
        Ok(TextArgs {
            search,
            language,
            sensitivity,
        })
    }
}

/// A parsed `$search`: what a document must and must not contain.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TextQuery {
    /// Terms of which a document must contain one (phrase words too),
    /// folded as the query asks.
    pub positive: Vec<String>,
    pub negated: Vec<String>,
    pub phrases: Vec<String>,
    pub negated_phrases: Vec<String>,
    pub language: Language,
    pub sensitivity: Sensitivity,
}

impl TextQuery {
    /// Parses a search string MongoDB's way: words are terms (any one
    /// matches), `"..."` is a phrase (all must appear), a `-` after a
    /// space or at the start negates the term or phrase that follows.
    pub fn parse(search: &str, language: Language, sensitivity: Sensitivity) -> TextQuery {
        let mut q = TextQuery {
            language,
            sensitivity,
            ..TextQuery::default()
        };
        let mut in_phrase = false;
        let mut negate_next = false;
        let mut phrase_negated = false;
        let mut phrase_start = 0;
        let mut word_start: Option<usize> = None;
        let mut previous_space = true;
        let add_words = |q: &mut TextQuery, text: &str, negated: bool| {
            for term in terms(text, language, sensitivity) {
                let list = if negated {
                    &mut q.negated
                } else {
                    &mut q.positive
                };
                if !list.contains(&term) {
                    list.push(term);
                }
            }
        };
        let chars: Vec<(usize, char)> = search.char_indices().collect();
        let flush = |q: &mut TextQuery,
                     start: &mut Option<usize>,
                     end: usize,
                     negated: bool,
                     in_phrase: bool,
                     phrase_negated: bool| {
            if let Some(s) = start.take() {
                // Words of a negated phrase are neither terms nor negations.
                if !(in_phrase && phrase_negated) {
                    add_words(q, &search[s..end], negated);
                }
            }
        };
        for &(i, c) in &chars {
            if c == '"' {
                flush(
                    &mut q,
                    &mut word_start,
                    i,
                    negate_next && !in_phrase,
                    in_phrase,
                    phrase_negated,
                );
                if in_phrase {
                    let phrase = search[phrase_start..i].to_string();
                    if phrase_negated {
                        q.negated_phrases.push(phrase);
                    } else {
                        q.phrases.push(phrase);
                    }
                    in_phrase = false;
                } else {
                    in_phrase = true;
                    phrase_negated = negate_next;
                    phrase_start = i + c.len_utf8();
                }
                negate_next = false;
                previous_space = false;
            } else if c.is_whitespace() {
                let negated = negate_next && !in_phrase;
                flush(
                    &mut q,
                    &mut word_start,
                    i,
                    negated,
                    in_phrase,
                    phrase_negated,
                );
                // A `-` negates the word right after it only.
                negate_next = false;
                previous_space = true;
            } else if c == '-' && previous_space && !in_phrase && word_start.is_none() {
                negate_next = true;
                previous_space = false;
            } else {
                if word_start.is_none() {
                    word_start = Some(i);
                }
                previous_space = false;
            }
        }
        let negated = negate_next && !in_phrase;
        flush(
            &mut q,
            &mut word_start,
            search.len(),
            negated,
            in_phrase,
            phrase_negated,
        );
        q
    }

    /// Whether a document matches: it has one of the positive terms, none
    /// of the negated ones, every phrase and no negated phrase. `strings`
    /// are its indexed strings, `language` the one it is written in.
    pub fn matches(&self, strings: &[(&str, f64)], language: Language) -> bool {
        if self.positive.is_empty() {
            return false;
        }
        let mut doc_terms: HashSet<String> = HashSet::new();
        for (text, _) in strings {
            doc_terms.extend(terms(text, language, self.sensitivity));
        }
        self.matches_terms(|t| doc_terms.contains(t), strings)
    }

    /// [`TextQuery::matches`] for a document whose terms (tokenized with
    /// the query's sensitivity) `has` tells.
    fn matches_terms(&self, has: impl Fn(&str) -> bool, strings: &[(&str, f64)]) -> bool {
        if !self.positive.iter().any(|t| has(t)) {
            return false;
        }
        if self.negated.iter().any(|t| has(t)) {
            return false;
        }
        let contains = |phrase: &str| {
            let needle = fold(phrase, self.sensitivity);
            strings
                .iter()
                .any(|(text, _)| fold(text, self.sensitivity).contains(&needle))
        };
        self.phrases.iter().all(|p| contains(p))
            && !self.negated_phrases.iter().any(|p| contains(p))
    }

    /// The terms an index lookup reads: the positive terms folded as the
    /// index folds them (lower case, no diacritics).
    pub fn lookup_terms(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for t in &self.positive {
            let folded = fold(t, Sensitivity::default());
            if !out.contains(&folded) {
                out.push(folded);
            }
        }
        out
    }

    /// The document's score: the sum of its term scores for the query's
    /// distinct lookup terms.
    pub fn score(&self, term_scores: &BTreeMap<String, f64>) -> f64 {
        self.lookup_terms()
            .iter()
            .filter_map(|t| term_scores.get(t))
            .sum()
    }
}

/// A filter's `$text`: its arguments, and once the planner has found
/// the collection's text index, the index's options and the parsed
/// query. Clones of one filter share the binding.
#[derive(Debug, Clone)]
pub struct TextFilter {
    pub args: TextArgs,
    bound: Arc<OnceLock<BoundText>>,
}

#[derive(Debug)]
struct BoundText {
    spec: Arc<TextSpec>,
    query: TextQuery,
}

/// The error of a `$text` on a collection without a text index.
pub fn index_required() -> Error {
    Error::new(
        ErrorCode::IndexNotFound,
        "text index required for $text query",
    )
}

/// The hidden field an aggregation document carries its `$text` score
/// in, from the leading `$match` to `{$meta: "textScore"}`: MongoDB keeps
/// the score as document metadata, which survives `$project`,
/// `$addFields` and `$replaceRoot` but not `$group`. No stored document
/// can hold this name, and pipeline output never shows it
/// ([`strip_score`]).
pub const SCORE_FIELD: &str = "\u{1}textScore";

/// The score a pipeline document carries, if any.
pub fn score_of(doc: &Document) -> Option<f64> {
    match doc.get(SCORE_FIELD) {
        Some(Bson::Double(score)) => Some(*score),
        _ => None,
    }
}

/// Removes the carried score (before a document leaves the pipeline).
pub fn strip_score(doc: &mut Document) {
    if doc.contains_key(SCORE_FIELD) {
        doc.remove(SCORE_FIELD);
    }
}

/// Whether a pipeline's stages ask for `{$meta: "textScore"}` (outside
/// sub-pipelines that read other collections, which have their own
/// `$match`).
pub fn pipeline_wants_score(stages: &[Bson]) -> bool {
    fn wants(value: &Bson) -> bool {
        match value {
            Bson::Document(d) => {
                if d.len() == 1 && d.get_str("$meta").ok() == Some("textScore") {
                    return true;
                }
                d.iter().any(|(key, v)| {
                    !matches!(key.as_str(), "$lookup" | "$unionWith" | "$graphLookup") && wants(v)
                })
            }
            Bson::Array(items) => items.iter().any(wants),
            _ => false,
        }
    }
    stages.iter().any(wants)
}

/// The error of `{$meta: "textScore"}` in a query without `$text`.
pub fn score_unavailable() -> Error {
    Error::new(
        ErrorCode::Location(40218),
        "query requires text score metadata, but it is not available",
    )
}

impl TextFilter {
    pub fn new(args: TextArgs) -> TextFilter {
        TextFilter {
            args,
            bound: Arc::new(OnceLock::new()),
        }
    }

    /// Binds the filter to the collection's text index (a filter is
    /// planned against one collection: a later binding keeps the first).
    pub fn bind(&self, spec: &Arc<TextSpec>) -> &TextQuery {
        let bound = self.bound.get_or_init(|| BoundText {
            spec: spec.clone(),
            query: TextQuery::parse(
                &self.args.search,
                self.args.language.unwrap_or(spec.language),
                self.args.sensitivity,
            ),
        });
        &bound.query
    }

    /// The document's score when it matches, `None` when it does not.
    pub fn evaluate(&self, doc: &Document) -> Result<Option<f64>> {
        let Some(bound) = self.bound.get() else {
            return Err(index_required());
        };
        // A document the index holds has a valid language; one that
        // does not (written before the index) is read in the default.
        let language = bound.spec.language_of(doc).unwrap_or(bound.spec.language);
        let strings = bound.spec.strings(doc);
        let mut scores = BTreeMap::new();
        let insensitive = bound.query.sensitivity == Sensitivity::default();
        // Insensitive, the query's terms are the index's: the document is
        // tokenized once, for its scores and for the match.
        if insensitive {
            for (text, weight) in &strings {
                score_string(text, *weight, language, &mut scores);
            }
            if bound.query.positive.is_empty()
                || !bound
                    .query
                    .matches_terms(|t| scores.contains_key(t), &strings)
            {
                return Ok(None);
            }
            return Ok(Some(bound.query.score(&scores)));
        }
        if !bound.query.matches(&strings, language) {
            return Ok(None);
        }
        for (text, weight) in strings {
            score_string(text, weight, language, &mut scores);
        }
        Ok(Some(bound.query.score(&scores)))
    }
}

/// Takes `$text` out of a filter document: from its top level or from a
/// top-level `$and`'s clauses. Returns the rest of the filter and the
/// text condition; a second `$text` is an error, as MongoDB's.
pub fn split_text(filter: &Document) -> Result<(Option<Document>, Option<TextFilter>)> {
    let mut found: Option<TextFilter> = None;
    let take = |value: &Bson, found: &mut Option<TextFilter>| -> Result<()> {
        if found.is_some() {
            crate::bail!(BadValue, "Too many text expressions");
        }
        *found = Some(TextFilter::new(TextArgs::parse(value)?));
        Ok(())
    };
    let in_and = |d: &Document| match d.get("$and") {
        Some(Bson::Array(items)) => items
            .iter()
            .any(|i| matches!(i, Bson::Document(c) if c.contains_key("$text"))),
        _ => false,
    };
    if !filter.contains_key("$text") && !in_and(filter) {
        return Ok((None, None));
    }
    let mut rest = Document::new();
    for (key, value) in filter {
        match (key.as_str(), value) {
            ("$text", _) => take(value, &mut found)?,
            ("$and", Bson::Array(items)) => {
                let mut clauses = Vec::with_capacity(items.len());
                for item in items {
                    match item {
                        Bson::Document(clause) if clause.contains_key("$text") => {
                            let mut kept = Document::new();
                            for (k, v) in clause {
                                if k == "$text" {
                                    take(v, &mut found)?;
                                } else {
                                    kept.insert(k.clone(), v.clone());
                                }
                            }
                            clauses.push(Bson::Document(kept));
                        }
                        other => clauses.push(other.clone()),
                    }
                }
                rest.insert(key.clone(), clauses);
            }
            _ => {
                rest.insert(key.clone(), value.clone());
            }
        }
    }
    Ok((Some(rest), found))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    const INSENSITIVE: Sensitivity = Sensitivity {
        case: false,
        diacritic: false,
    };

    #[test]
    fn every_stemmed_language_drops_its_own_stop_words() {
        // "the" is only an English stop word; each language drops its own.
        assert_eq!(
            terms("le chat et la souris", Language::French, INSENSITIVE),
            vec!["chat", "sour"]
        );
        assert_eq!(
            terms("der Hund und die Katze", Language::German, INSENSITIVE),
            vec!["hund", "katz"]
        );
        assert_eq!(
            terms("el perro y el gato", Language::Spanish, INSENSITIVE),
            vec!["perr", "gat"]
        );
        // Diacritics are folded on both sides: "été" is French.
        assert!(Language::French.is_stop_word("été"));
        assert!(Language::French.is_stop_word("ete"));
        assert!(!Language::French.is_stop_word("the"));
        assert!(Language::Russian.is_stop_word("и"));
        for (_, _, language) in LANGUAGES {
            assert_eq!(
                language.stop_word_list().is_empty(),
                language == Language::None,
                "{language:?}"
            );
        }
    }

    #[test]
    fn words_are_folded_stopped_and_stemmed() {
        assert_eq!(
            terms(
                "The Quick brown foxes are RUNNING",
                Language::English,
                INSENSITIVE
            ),
            vec!["quick", "brown", "fox", "run"]
        );
        assert_eq!(
            terms("Crème brûlée", Language::None, INSENSITIVE),
            vec!["creme", "brulee"]
        );
        let sensitive = Sensitivity {
            case: true,
            diacritic: true,
        };
        assert_eq!(terms("Crème", Language::None, sensitive), vec!["Crème"]);
        assert_eq!(
            terms("the and of", Language::English, INSENSITIVE),
            Vec::<String>::new()
        );
        // `none` keeps stop words and does not stem.
        assert_eq!(
            terms("the foxes", Language::None, INSENSITIVE),
            vec!["the", "foxes"]
        );
        assert_eq!(Language::parse("ES"), Some(Language::Spanish));
        assert_eq!(Language::parse("klingon"), None);
        assert_eq!(
            terms("corriendo", Language::Spanish, INSENSITIVE),
            vec!["corr"]
        );
    }

    fn spec(fields: &[&str], options: Document) -> TextSpec {
        let fields: Vec<String> = fields.iter().map(|s| s.to_string()).collect();
        TextSpec::parse(&fields, &options).unwrap()
    }

    #[test]
    fn scores_follow_mongodb_formula() {
        let s = spec(&["title"], doc! {});
        // One token, not equal to the raw text ("coffee" stems to "coffe").
        let scores = s.score_document(&doc! {"title": "coffee"}).unwrap();
        assert_eq!(scores.get("coffe"), Some(&1.0));
        // "cake" stems to itself and is the whole field: 1.1.
        let scores = s.score_document(&doc! {"title": "cake"}).unwrap();
        assert_eq!(scores.get("cake"), Some(&1.1));
        // coffee ×2 of 3 tokens: freq 1.5, coeff 0.5·2/3+0.5.
        let scores = s
            .score_document(&doc! {"title": "coffee shop coffee"})
            .unwrap();
        let expected = 1.5 * (0.5 * 2.0 / 3.0 + 0.5);
        assert!((scores["coffe"] - expected).abs() < 1e-12);
        assert!((scores["shop"] - 1.0 * (0.5 / 3.0 + 0.5)).abs() < 1e-12);
        // Weights multiply, fields add.
        let s = spec(&["title", "body"], doc! {"weights": {"title": 10}});
        let scores = s
            .score_document(&doc! {"title": "tea", "body": "green tea"})
            .unwrap();
        assert!((scores["tea"] - (10.0 * 1.1 + 0.75)).abs() < 1e-12);
    }

    #[test]
    fn spec_options_parse_and_show() {
        let s = spec(
            &["b", "a"],
            doc! {"weights": {"a": 5}, "default_language": "spanish"},
        );
        assert_eq!(
            s.options(),
            doc! {"weights": {"a": 5, "b": 1}, "default_language": "spanish", "language_override": "language", "textIndexVersion": 3}
        );
        let s = spec(&["$**"], doc! {});
        assert_eq!(
            s.options().get_document("weights").unwrap(),
            &doc! {"$**": 1}
        );
        let code = |options: Document| {
            TextSpec::parse(&["a".to_string()], &options)
                .unwrap_err()
                .code
                .number()
        };
        assert_eq!(code(doc! {"weights": {"a": "x"}}), 17283);
        assert_eq!(code(doc! {"weights": {"a": 0}}), 16674);
        assert_eq!(code(doc! {"default_language": "klingon"}), 17264);
        assert_eq!(code(doc! {"language_override": "$x"}), 17136);
        assert_eq!(code(doc! {"textIndexVersion": 1}), 17364);
    }

    #[test]
    fn wildcard_and_paths_find_strings() {
        let s = spec(&["$**"], doc! {"weights": {"a.b": 3}});
        let d = doc! {"x": "one", "a": {"b": ["two", 5]}, "n": 1};
        assert_eq!(s.strings(&d), vec![("one", 1.0), ("two", 3.0)]);
        let s = spec(&["a.b"], doc! {});
        let d = doc! {"a": [{"b": "x"}, {"b": "y"}]};
        assert_eq!(s.strings(&d), vec![("x", 1.0), ("y", 1.0)]);
    }

    #[test]
    fn language_override_picks_the_stemmer() {
        let s = spec(&["t"], doc! {});
        assert_eq!(
            s.language_of(&doc! {"language": "fr"}).unwrap(),
            Language::French
        );
        assert_eq!(
            s.language_of(&doc! {"language": "xx"})
                .unwrap_err()
                .code
                .number(),
            17262
        );
        assert_eq!(
            s.language_of(&doc! {"language": 1})
                .unwrap_err()
                .code
                .number(),
            17261
        );
    }

    #[test]
    fn search_strings_parse_into_terms_phrases_and_negations() {
        let q = TextQuery::parse(
            "coffee -tea \"green shop\" -\"black cat\" the",
            Language::English,
            INSENSITIVE,
        );
        assert_eq!(q.positive, vec!["coffe", "green", "shop"]);
        assert_eq!(q.negated, vec!["tea"]);
        assert_eq!(q.phrases, vec!["green shop"]);
        assert_eq!(q.negated_phrases, vec!["black cat"]);
        // A hyphen inside a word is not a negation.
        let q = TextQuery::parse("e-mail", Language::English, INSENSITIVE);
        assert_eq!(q.positive, vec!["e", "mail"]);
        assert!(q.negated.is_empty());
    }

    #[test]
    fn matching_needs_a_term_and_honours_negation_and_phrases() {
        let q = TextQuery::parse("coffee -decaf", Language::English, INSENSITIVE);
        let m = |text: &str| q.matches(&[(text, 1.0)], Language::English);
        assert!(m("Coffee shop"));
        assert!(!m("decaf coffee"));
        assert!(!m("tea"));
        let q = TextQuery::parse("\"Coffee Shop\"", Language::English, INSENSITIVE);
        assert!(q.matches(&[("the coffee shop", 1.0)], Language::English));
        assert!(!q.matches(&[("shop of coffee", 1.0)], Language::English));
        let cased = Sensitivity {
            case: true,
            diacritic: false,
        };
        let q = TextQuery::parse("Coffee", Language::English, cased);
        assert!(q.matches(&[("Coffee", 1.0)], Language::English));
        assert!(!q.matches(&[("coffee", 1.0)], Language::English));
        let q = TextQuery::parse("cafe", Language::English, INSENSITIVE);
        assert!(q.matches(&[("Café", 1.0)], Language::English));
        let accents = Sensitivity {
            case: false,
            diacritic: true,
        };
        let q = TextQuery::parse("cafe", Language::English, accents);
        assert!(!q.matches(&[("Café", 1.0)], Language::English));
        // Only negations match nothing.
        let q = TextQuery::parse("-tea", Language::English, INSENSITIVE);
        assert!(!q.matches(&[("coffee", 1.0)], Language::English));
    }

    #[test]
    fn text_args_parse_with_mongodb_errors() {
        let a = TextArgs::parse(&Bson::Document(
            doc! {"$search": "x", "$language": "fr", "$caseSensitive": true},
        ))
        .unwrap();
        assert_eq!(a.language, Some(Language::French));
        assert!(a.sensitivity.case);
        let code = |d: Document| {
            TextArgs::parse(&Bson::Document(d))
                .unwrap_err()
                .code
                .number()
        };
        assert_eq!(code(doc! {}), 9);
        assert_eq!(code(doc! {"$search": 1}), 14);
        assert_eq!(code(doc! {"$search": "x", "$language": "xx"}), 2);
        assert_eq!(code(doc! {"$search": "x", "$foo": 1}), 2);
    }
}
