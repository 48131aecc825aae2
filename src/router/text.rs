//! `$text` sorted by score with a limit, on one partition: the best
//! `keep` matches, fetching only those. Each text index entry holds its
//! term's score in the document, so the query's entries alone give every
//! candidate its score (the sum over the query's terms, what the fetched
//! document scores too); the candidates are then fetched in the query's
//! order (best first, ties by `_id`) and checked against the whole filter
//! (phrases, negations, other conditions) until `keep` match. MongoDB
//! fetches every candidate before it sorts; this reads the same entries
//! and only the documents it returns (and those the filter refuses).

use std::collections::HashMap;
use std::sync::Arc;

use bson::Bson;

use super::geo::MatchIter;
use super::indexes::{Examined, HashScope};
use super::plan::{Access, PartitionPlan, QueryPlan};
use super::{charge, decode_record, Loaded, Reader};
use crate::error::{Error, Result};
use crate::query::filter::Filter;
use crate::query::sort::SortSpec;
use crate::query::text::Sensitivity;
use crate::storage::{blocking, IndexScan, RecordKey};

/// A candidate: its record key and the score its entries add up to.
struct Candidate {
    key: RecordKey,
    score: f64,
}

/// The partition's matches, best score first, or `None` when the query
/// is not a case- and diacritic-insensitive `$text` read through the text
/// index, sorted by score alone, with a limit.
pub(super) fn ranked(
    reader: &Reader,
    id: u64,
    (plan, part): (&QueryPlan, &PartitionPlan),
    (filter, sort): (Option<&Filter>, Option<&SortSpec>),
    keep: Option<usize>,
    examined: Option<Arc<Examined>>,
) -> Option<MatchIter> {
    let keep = keep?;
    let filter = filter?;
    let text = filter.text()?;
    if text.args.sensitivity != Sensitivity::default() || !sort?.is_text_score_only() {
        return None;
    }
    let Access::Index(chosen) = &part.access else {
        return None;
    };
    chosen.scan.index.text.as_ref()?;
    let (reader, chosen, filter) = (reader.clone(), Arc::clone(chosen), filter.clone());
    let scope = HashScope {
        range: plan
            .sharded
            .then_some((part.partition.min, part.partition.max)),
        pinned: plan.key_hashes.clone(),
    };
    let loaded = Loaded {
        collection: id,
        partition: part.partition.id,
    };
    let start = reader.parts.start_of(part.partition.min);
    let mut ranked: Option<std::vec::IntoIter<Candidate>> = None;
    let mut found = 0usize;
    Some(Box::new(std::iter::from_fn(move || {
        if ranked.is_none() {
            charge::charge(id, loaded.partition, charge::PARTITION_QUERY);
            match candidates(
                &reader,
                id,
                start,
                &chosen.scan,
                &scope,
                examined.as_deref(),
            ) {
                Ok(c) => ranked = Some(c.into_iter()),
                Err(e) => {
                    ranked = Some(Vec::new().into_iter());
                    return Some(Err(e));
                }
            }
        }
        let candidates = ranked.as_mut()?;
        loop {
            // Candidates come in the query's order (score, then `_id`):
            // once `keep` match, no later one can come before them.
            if found >= keep {
                return None;
            }
            let candidate = candidates.next()?;
            let fetched = || -> Result<Option<(super::Record, _)>> {
                crate::query::interrupt::check()?;
                charge::count(|w| w.docs_examined += 1);
                if let Some(e) = &examined {
                    e.doc();
                }
                let Some(bytes) = blocking::wait(reader.view.record(&candidate.key))? else {
                    return Ok(None);
                };
                loaded.charge(bytes.len(), charge::INDEX_LOOKUP);
                let rec = decode_record(candidate.key.clone(), &bytes)?;
                let details = filter.try_matches_with_details(&rec.doc)?;
                Ok(details.matched.then_some((rec, details)))
            };
            match fetched() {
                Ok(Some(found_match)) => {
                    found += 1;
                    return Some(Ok(found_match));
                }
                Ok(None) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
    })))
}

/// Every document the query's entries name in this partition, with its
/// summed score, in the order the query sorts by: best score first,
/// ties by `_id` (the record key's `keystring(_id)` keeps its order).
fn candidates(
    reader: &Reader,
    id: u64,
    partition: i64,
    scan: &crate::index::plan::IndexPlan,
    scope: &HashScope,
    examined: Option<&Examined>,
) -> Result<Vec<Candidate>> {
    let mut scores: HashMap<Vec<u8>, (i64, f64)> = HashMap::new();
    for (from, to) in &scan.ranges {
        let index_scan = IndexScan {
            collection: id,
            index: scan.index.number,
            partition: Some(partition),
            from: from.clone(),
            to: to.clone(),
            reverse: false,
        };
        for item in blocking::iter(reader.view.scan_index(index_scan)) {
            crate::query::interrupt::check()?;
            let (entry, value) = item?;
            charge::count(|w| w.keys_examined += 1);
            if let Some(e) = examined {
                e.key();
            }
            let corrupt = || Error::internal("corrupt index entry");
            let hash = crate::index::entry_hash(&value).ok_or_else(corrupt)?;
            if !scope.admits(hash) {
                continue;
            }
            let key_len = crate::index::entry_key_len(&value).ok_or_else(corrupt)?;
            let score = match crate::index::entry_values(&value)?.last() {
                Some(Bson::Double(s)) => *s,
                _ => return Err(corrupt()),
            };
            scores
                .entry(entry.id(key_len).to_vec())
                .or_insert((hash, 0.0))
                .1 += score;
        }
    }
    let mut ranked: Vec<Candidate> = scores
        .into_iter()
        .map(|(id_key, (hash, score))| Candidate {
            key: RecordKey::new(id, hash, id_key),
            score,
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.key.id.cmp(&b.key.id))
    });
    Ok(ranked)
}
