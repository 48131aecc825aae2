//! Mutations: small changes to an input that keep most of its shape.
//!
//! Structured inputs are mutated as BSON trees (replace a node with a
//! generated fragment, change a key to an operator name, duplicate or
//! wrap a node, splice in a node of another input, push a number to an
//! edge), so most mutants still parse and reach the evaluation code.
//! Byte inputs get byte mutations, with a bias to length fields.

use bson::{Bson, Document};

use crate::decode_document;
use crate::generate::Gen;
use crate::targets::{Input, Target};

/// Most bytes a mutated input may have; bigger mutants are dropped.
pub const MAX_INPUT: usize = 64 * 1024;

/// A new input for `target`: fresh from the grammar, or a mutant of one
/// from `pool`.
pub fn next_input(target: &Target, pool: &[Vec<u8>], g: &mut Gen) -> Vec<u8> {
    if pool.is_empty() || g.chance(0.1) {
        return (target.generate)(g);
    }
    let base = &pool[g.below(pool.len())];
    let other = &pool[g.below(pool.len())];
    let rounds = 1 + g.below(4);
    let out = match target.input {
        Input::Bytes => {
            // Wire and BSON inputs are mostly valid documents inside;
            // mutating their trees reaches deeper than flipping bits.
            let mut out = base.clone();
            for _ in 0..rounds {
                out = if g.chance(0.3) {
                    mutate_embedded_document(&out, other, g)
                } else {
                    mutate_bytes(out, other, g)
                };
            }
            out
        }
        Input::Document => match (decode_document(base), decode_document(other)) {
            (Some(mut doc), other) => {
                let other = other.unwrap_or_default();
                for _ in 0..rounds {
                    mutate_document(&mut doc, &other, g);
                }
                doc.to_vec().unwrap_or_default()
            }
            _ => mutate_bytes(base.clone(), other, g),
        },
    };
    if out.len() > MAX_INPUT {
        return (target.generate)(g);
    }
    out
}

/// Byte mutations: flips, interesting integers (biased to length
/// fields), insertions, deletions, truncation, splices.
pub fn mutate_bytes(mut data: Vec<u8>, other: &[u8], g: &mut Gen) -> Vec<u8> {
    if data.is_empty() {
        data.push(0);
    }
    let at = g.below(data.len());
    match g.below(9) {
        0 => data[at] ^= 1 << g.below(8),
        1 => data[at] = *g.pick(&[0, 1, 0x7f, 0x80, 0xff, 0x03, 0x04, 0x10, 0x13]),
        2 => {
            // Overwrite four bytes with a length-like value.
            let v: i32 = *g.pick(&[
                0,
                1,
                4,
                5,
                16,
                -1,
                i32::MAX,
                i32::MIN,
                48_000_000,
                16 * 1024 * 1024 + 1,
            ]);
            let delta = g.below(9) as i32 - 4;
            for (i, b) in v.wrapping_add(delta).to_le_bytes().into_iter().enumerate() {
                if let Some(slot) = data.get_mut(at + i) {
                    *slot = b;
                }
            }
        }
        3 => {
            let n = 1 + g.below(8);
            let fill = g.below(256) as u8;
            data.splice(at..at, std::iter::repeat_n(fill, n));
        }
        4 => {
            let end = (at + 1 + g.below(16)).min(data.len());
            data.drain(at..end);
        }
        5 => data.truncate(at),
        6 if !other.is_empty() => {
            let from = g.below(other.len());
            let end = (from + 1 + g.below(64)).min(other.len());
            data.splice(at..at, other[from..end].iter().copied());
        }
        7 => {
            // Repeat a span: a frame sent twice, a section doubled.
            let end = (at + 1 + g.below(64)).min(data.len());
            let span: Vec<u8> = data[at..end].to_vec();
            data.splice(at..at, span);
        }
        _ => {
            let v = g.u64();
            data[at] = v as u8;
        }
    }
    data
}

/// Finds a BSON document inside `data` (after a wire header, or the
/// whole input), mutates its tree and writes it back with the lengths
/// around it fixed where they are known.
fn mutate_embedded_document(data: &[u8], other: &[u8], g: &mut Gen) -> Vec<u8> {
    // The body of a one-section OP_MSG starts at 21; a BSON input at 0.
    for start in [21usize, 0] {
        let Some(rest) = data.get(start..) else {
            continue;
        };
        let Some(len) = rest
            .get(..4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        else {
            continue;
        };
        let Ok(len) = usize::try_from(len) else {
            continue;
        };
        if len < 5 || len > rest.len() {
            continue;
        }
        let Some(mut doc) = decode_document(&rest[..len]) else {
            continue;
        };
        let other_doc = decode_document(other).unwrap_or_default();
        mutate_document(&mut doc, &other_doc, g);
        let Ok(bytes) = doc.to_vec() else { continue };
        let mut out = data[..start].to_vec();
        out.extend(&bytes);
        out.extend(&rest[len..]);
        if start == 21 {
            // Fix the message length; a checksum, if any, no longer
            // matches, which is one more case for the decoder.
            let total = out.len() as i32;
            out[..4].copy_from_slice(&total.to_le_bytes());
        }
        return out;
    }
    mutate_bytes(data.to_vec(), other, g)
}

/// One mutation at a random node of `doc`.
pub fn mutate_document(doc: &mut Document, other: &Document, g: &mut Gen) {
    let nodes = count_document(doc);
    let target = g.below(nodes.max(1));
    let donor = if other.is_empty() || g.chance(0.5) {
        None
    } else {
        pick_node_in(other, g)
    };
    let mut counter = target;
    mutate_in_document(doc, &mut counter, donor, g);
}

fn count(value: &Bson) -> usize {
    1 + match value {
        Bson::Document(d) => count_document(d),
        Bson::Array(a) => a.iter().map(count).sum(),
        _ => 0,
    }
}

fn count_document(doc: &Document) -> usize {
    doc.iter().map(|(_, v)| count(v)).sum()
}

/// A copy of a random node of `doc`.
fn pick_node_in(doc: &Document, g: &mut Gen) -> Option<Bson> {
    let n = count_document(doc);
    if n == 0 {
        return None;
    }
    let mut k = g.below(n);
    find_in_document(doc, &mut k)
}

fn find_in_document(doc: &Document, k: &mut usize) -> Option<Bson> {
    for (_, v) in doc {
        if let Some(found) = find(v, k) {
            return Some(found);
        }
    }
    None
}

fn find(value: &Bson, k: &mut usize) -> Option<Bson> {
    if *k == 0 {
        return Some(value.clone());
    }
    *k -= 1;
    match value {
        Bson::Document(d) => find_in_document(d, k),
        Bson::Array(a) => a.iter().find_map(|v| find(v, k)),
        _ => None,
    }
}

/// Walks in pre-order; when `counter` reaches zero at an entry of a
/// document, mutates that entry (its value, or its key). Returns true
/// once done.
fn mutate_in_document(
    doc: &mut Document,
    counter: &mut usize,
    donor: Option<Bson>,
    g: &mut Gen,
) -> bool {
    let keys: Vec<String> = doc.keys().cloned().collect();
    for key in keys {
        if *counter == 0 {
            mutate_entry(doc, &key, donor, g);
            return true;
        }
        *counter -= 1;
        let done = match doc.get_mut(&key) {
            Some(Bson::Document(d)) => mutate_in_document(d, counter, donor.clone(), g),
            Some(Bson::Array(a)) => mutate_in_array(a, counter, donor.clone(), g),
            _ => false,
        };
        if done {
            return true;
        }
    }
    false
}

fn mutate_in_array(
    items: &mut Vec<Bson>,
    counter: &mut usize,
    donor: Option<Bson>,
    g: &mut Gen,
) -> bool {
    for i in 0..items.len() {
        if *counter == 0 {
            match g.below(4) {
                0 => {
                    items.remove(i);
                }
                1 if items.len() < 64 => {
                    let copy = items[i].clone();
                    items.insert(i, copy);
                }
                _ => mutate_value(&mut items[i], donor, g),
            }
            return true;
        }
        *counter -= 1;
        let done = match &mut items[i] {
            Bson::Document(d) => mutate_in_document(d, counter, donor.clone(), g),
            Bson::Array(a) => mutate_in_array(a, counter, donor.clone(), g),
            _ => false,
        };
        if done {
            return true;
        }
    }
    false
}

fn mutate_entry(doc: &mut Document, key: &str, donor: Option<Bson>, g: &mut Gen) {
    match g.below(8) {
        0 => {
            // Rename the key, keeping its place.
            let new_key = g.word();
            let entries: Vec<(String, Bson)> = std::mem::take(doc).into_iter().collect();
            for (k, v) in entries {
                let k = if k == key { new_key.clone() } else { k };
                doc.insert(k, v);
            }
        }
        1 => {
            doc.remove(key);
        }
        2 => {
            let (k, v) = (g.word(), g.fragment());
            doc.insert(k, v);
        }
        _ => {
            if let Some(v) = doc.get_mut(key) {
                mutate_value(v, donor, g);
            }
        }
    }
}

fn mutate_value(value: &mut Bson, donor: Option<Bson>, g: &mut Gen) {
    match g.below(9) {
        0 | 1 => *value = g.fragment(),
        2 => *value = g.number(),
        3 => *value = g.scalar(),
        4 => {
            if let Some(d) = donor {
                *value = d;
            } else {
                *value = g.expr();
            }
        }
        5 => {
            // Wrap: {$op: [value, ...]} or [value].
            let inner = std::mem::take(value);
            *value = if g.chance(0.6) {
                let op = g.operator();
                let mut args = vec![inner];
                if g.chance(0.5) {
                    args.push(g.expr());
                }
                Bson::Document(bson::doc! {op: args})
            } else {
                Bson::Array(vec![inner])
            };
        }
        6 => {
            // Grow an array or a string a little: shapes a test would
            // not think of, still small.
            match value {
                Bson::Array(a) if !a.is_empty() && a.len() < 64 => {
                    let copy = a.clone();
                    a.extend(copy);
                }
                Bson::String(s) if s.len() < 4096 => {
                    let copy = s.clone();
                    s.push_str(&copy);
                }
                _ => *value = g.value(),
            }
        }
        7 => {
            if let Bson::String(s) = value {
                *s = g.string();
            } else {
                *value = Bson::String(g.string());
            }
        }
        _ => *value = g.value(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::targets::TARGETS;

    #[test]
    fn mutants_stay_within_the_size_bound() {
        let mut g = Gen::new(11);
        for target in TARGETS {
            let mut pool = vec![(target.generate)(&mut g)];
            for _ in 0..300 {
                let next = next_input(target, &pool, &mut g);
                assert!(next.len() <= MAX_INPUT);
                if pool.len() < 50 {
                    pool.push(next);
                }
            }
        }
    }

    #[test]
    fn mutating_a_document_changes_it_sometimes() {
        let mut g = Gen::new(5);
        let base = bson::doc! {"filter": {"a": {"$gt": 1}}, "docs": [{"_id": 1, "a": 2}]};
        let changed = (0..100)
            .filter(|_| {
                let mut d = base.clone();
                mutate_document(&mut d, &Document::new(), &mut g);
                d != base
            })
            .count();
        assert!(changed > 50, "{changed} of 100 mutants differ");
    }
}
