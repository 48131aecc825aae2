//! Date operators: `$year`, `$month`, ..., `$dateToString`,
//! `$dateFromString`, `$dateTrunc`, `$dateAdd`, `$dateSubtract`,
//! `$dateDiff`, `$dateToParts`, `$dateFromParts`.
//!
//! Dates are `bson::DateTime` (milliseconds since the epoch, proleptic
//! Gregorian calendar). Calendar math is done here on "local" milliseconds:
//! the instant shifted by the time zone's offset at that instant. Zones are
//! fixed offsets (`UTC`, `GMT`, `+hh:mm`, `-hhmm`, `+hh`) or Olson names
//! (`America/New_York`) from the `chrono-tz` database, daylight saving
//! time included; any other name is MongoDB's 40485.

use bson::{Bson, DateTime, Document};

use super::args::{eval_field, field_absent, field_given, object_fields, object_form};
use super::{eval, is_nullish, owned, type_of, Arity, Evaluation, Node, Operator, Scope, Value};
use crate::error::{Error, ErrorCode, Result};
use crate::query::compare::{type_name, Number};

const MS_PER_SECOND: i64 = 1000;
const MS_PER_MINUTE: i64 = 60 * MS_PER_SECOND;
const MS_PER_HOUR: i64 = 60 * MS_PER_MINUTE;
const MS_PER_DAY: i64 = 24 * MS_PER_HOUR;

/// This family's operators, sorted by name.
pub(super) static OPERATORS: &[Operator] = &[
    named("$dateAdd", op_date_add, date_add_args),
    named("$dateDiff", op_date_diff, date_diff_args),
    named("$dateFromParts", op_date_from_parts, date_from_parts_args),
    named(
        "$dateFromString",
        op_date_from_string,
        date_from_string_args,
    ),
    named("$dateSubtract", op_date_subtract, date_subtract_args),
    named("$dateToParts", op_date_to_parts, date_to_parts_args),
    named("$dateToString", op_date_to_string, date_to_string_args),
    named("$dateTrunc", op_date_trunc, date_trunc_args),
    extractor("$dayOfMonth", op_day_of_month, day_of_month_args),
    extractor("$dayOfWeek", op_day_of_week, day_of_week_args),
    extractor("$dayOfYear", op_day_of_year, day_of_year_args),
    extractor("$hour", op_hour, hour_args),
    extractor("$isoDayOfWeek", op_iso_day_of_week, iso_day_of_week_args),
    extractor("$isoWeek", op_iso_week, iso_week_args),
    extractor("$isoWeekYear", op_iso_week_year, iso_week_year_args),
    extractor("$millisecond", op_millisecond, millisecond_args),
    extractor("$minute", op_minute, minute_args),
    extractor("$month", op_month, month_args),
    extractor("$second", op_second, second_args),
    extractor("$week", op_week, week_args),
    extractor("$year", op_year, year_args),
];

type LazyFn = for<'a> fn(&'a [Node], &Scope<'a>) -> Result<Value<'a>>;

/// An operator that takes only the object form (`{date, unit, ...}`).
const fn named(name: &'static str, f: LazyFn, parse: super::ArgsParser) -> Operator {
    Operator {
        name,
        arity: Arity::Any,
        evaluation: Evaluation::Lazy(f),
        parse_args: Some(parse),
    }
}

/// A field extractor: `{$year: <date>}` or `{$year: {date, timezone}}`.
const fn extractor(name: &'static str, f: LazyFn, parse: super::ArgsParser) -> Operator {
    named(name, f, parse)
}

// ---------------------------------------------------------------------------
// Civil calendar (Howard Hinnant's algorithms), on days since 1970-01-01.

/// Days since the epoch of a proleptic Gregorian date.
pub(super) fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number: (year, month 1-12, day 1-31).
pub(super) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A local date and time broken into calendar fields.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Parts {
    pub(super) year: i64,
    pub(super) month: i64,
    pub(super) day: i64,
    pub(super) hour: i64,
    pub(super) minute: i64,
    pub(super) second: i64,
    pub(super) millisecond: i64,
    /// 0 = Sunday.
    pub(super) weekday: i64,
    /// 1-based day of the year.
    pub(super) day_of_year: i64,
}

impl Parts {
    pub(super) fn of(local_ms: i64) -> Parts {
        let days = local_ms.div_euclid(MS_PER_DAY);
        let ms = local_ms.rem_euclid(MS_PER_DAY);
        let (year, month, day) = civil_from_days(days);
        Parts {
            year,
            month,
            day,
            hour: ms / MS_PER_HOUR,
            minute: ms % MS_PER_HOUR / MS_PER_MINUTE,
            second: ms % MS_PER_MINUTE / MS_PER_SECOND,
            millisecond: ms % MS_PER_SECOND,
            weekday: (days + 4).rem_euclid(7),
            day_of_year: days - days_from_civil(year, 1, 1) + 1,
        }
    }

    /// 1 = Monday ... 7 = Sunday.
    fn iso_day_of_week(&self) -> i64 {
        (self.weekday + 6) % 7 + 1
    }

    /// (ISO week-numbering year, ISO week 1-53).
    fn iso_week(&self) -> (i64, i64) {
        let days = days_from_civil(self.year, self.month, self.day);
        let thursday = days - (self.iso_day_of_week() - 1) + 3;
        let (year, _, _) = civil_from_days(thursday);
        let week = (thursday - days_from_civil(year, 1, 1)) / 7 + 1;
        (year, week)
    }

    /// Week of the year 0-53, weeks starting on Sunday (strftime's `%U`).
    fn week(&self) -> i64 {
        (self.day_of_year - 1 + 7 - self.weekday) / 7
    }
}

// ---------------------------------------------------------------------------
// Time zones.

/// A time zone: a fixed UTC offset, or an Olson zone whose offset
/// depends on the instant (daylight saving time), from the `chrono-tz`
/// database.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum TimeZone {
    Fixed(i64),
    Named(chrono_tz::Tz),
}

impl TimeZone {
    pub(super) const UTC: TimeZone = TimeZone::Fixed(0);

    pub(super) fn parse(name: &str) -> Option<TimeZone> {
        if matches!(
            name,
            "UTC" | "GMT" | "Z" | "Etc/UTC" | "Etc/GMT" | "Etc/Zulu" | "Zulu"
        ) {
            return Some(TimeZone::UTC);
        }
        if let Some(offset_ms) = parse_offset(name) {
            return Some(TimeZone::Fixed(offset_ms));
        }
        name.parse::<chrono_tz::Tz>().ok().map(TimeZone::Named)
    }

    /// The zone's offset from UTC at the instant `utc_ms`.
    fn offset_at(self, utc_ms: i64) -> i64 {
        use chrono::{Offset, TimeZone as _};
        match self {
            TimeZone::Fixed(offset_ms) => offset_ms,
            TimeZone::Named(tz) => chrono::DateTime::from_timestamp_millis(utc_ms)
                .map(|t| {
                    let offset = tz.offset_from_utc_datetime(&t.naive_utc());
                    i64::from(offset.fix().local_minus_utc()) * MS_PER_SECOND
                })
                .unwrap_or(0),
        }
    }

    fn to_local(self, utc_ms: i64) -> i64 {
        utc_ms.saturating_add(self.offset_at(utc_ms))
    }

    /// The instant of a local time. A local time that occurs twice (when
    /// clocks go back) is its first occurrence; one that does not occur
    /// (when clocks go forward) is read with the offset before the change.
    fn to_utc(self, local_ms: i64) -> i64 {
        match self {
            TimeZone::Fixed(offset_ms) => local_ms.saturating_sub(offset_ms),
            TimeZone::Named(_) => {
                let before = self.offset_at(local_ms.saturating_sub(MS_PER_DAY));
                let after = self.offset_at(local_ms.saturating_add(MS_PER_DAY));
                let first = local_ms.saturating_sub(before);
                if self.offset_at(first) == before {
                    return first;
                }
                let second = local_ms.saturating_sub(after);
                if self.offset_at(second) == after {
                    return second;
                }
                first
            }
        }
    }

    /// The offset at `utc_ms` in minutes, for `%z` and `%Z`.
    fn offset_minutes(self, utc_ms: i64) -> i64 {
        self.offset_at(utc_ms) / MS_PER_MINUTE
    }
}

/// `+hh`, `+hhmm`, `+hh:mm` (or `-`) as milliseconds.
fn parse_offset(text: &str) -> Option<i64> {
    let (sign, rest) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return None,
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    if !digits.chars().all(|c| c.is_ascii_digit())
        || rest.matches(':').count() > 1
        || (rest.contains(':') && rest.find(':') != Some(2))
    {
        return None;
    }
    let (hours, minutes) = match digits.len() {
        2 => (digits.parse::<i64>().ok()?, 0),
        4 => (
            digits[..2].parse::<i64>().ok()?,
            digits[2..].parse::<i64>().ok()?,
        ),
        _ => return None,
    };
    if minutes >= 60 {
        return None;
    }
    Some(sign * (hours * MS_PER_HOUR + minutes * MS_PER_MINUTE))
}

/// Evaluates an optional `timezone` argument: `Ok(None)` for null.
fn timezone_of<'a>(node: Option<&'a Node>, scope: &Scope<'a>) -> Result<Option<TimeZone>> {
    let Some(node) = node else {
        return Ok(Some(TimeZone::UTC));
    };
    let value = eval(node, scope)?;
    if is_nullish(&value) {
        return Ok(None);
    }
    let Some(Bson::String(name)) = value.as_deref() else {
        return Err(Error::new(
            ErrorCode::TimezoneNotString,
            format!(
                "timezone must evaluate to a string, found {}",
                type_of(&value)
            ),
        ));
    };
    TimeZone::parse(name).map(Some).ok_or_else(|| {
        Error::new(
            ErrorCode::UnknownTimeZone,
            format!("unrecognized time zone identifier: \"{name}\""),
        )
    })
}

/// Milliseconds of a date-like value: dates, timestamps (seconds) and
/// ObjectIds (their creation second), as MongoDB coerces them.
pub(super) fn date_millis(value: &Bson) -> Option<i64> {
    match value {
        Bson::DateTime(d) => Some(d.timestamp_millis()),
        Bson::Timestamp(t) => Some(i64::from(t.time) * MS_PER_SECOND),
        Bson::ObjectId(o) => Some(o.timestamp().timestamp_millis()),
        _ => None,
    }
}

fn require_date(value: &Value<'_>) -> Result<i64> {
    value.as_deref().and_then(date_millis).ok_or_else(|| {
        Error::new(
            ErrorCode::ConvertToDateUnsupported,
            format!("can't convert from BSON type {} to Date", type_of(value)),
        )
    })
}

// ---------------------------------------------------------------------------
// Field extractors.

/// `{date, timezone}` or, for any other argument, `None` (a date
/// expression).
fn extractor_args(name: &str, arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Ok(None);
    };
    if doc.keys().next().is_some_and(|k| k.starts_with('$')) {
        return Ok(None);
    }
    let args = object_form(doc, &["date", "timezone"], |field| {
        Error::new(
            ErrorCode::DateConversionUnknownOption,
            format!("unrecognized option to {name}: \"{field}\""),
        )
    })?;
    if !field_given(&args, 0) {
        return Err(Error::new(
            ErrorCode::DateConversionMissingDate,
            format!("missing 'date' argument to {name}, provided: {doc}"),
        ));
    }
    Ok(Some(args))
}

/// The local calendar fields of an extractor's argument, or `None` for null.
fn extract<'a>(name: &str, args: &'a [Node], scope: &Scope<'a>) -> Result<Option<Parts>> {
    let (date_node, tz_node) = match object_fields(args) {
        Some(fields) => (fields.first(), fields.get(1).filter(|n| !field_absent(n))),
        None => {
            if args.len() != 1 {
                return Err(Error::new(
                    ErrorCode::OperatorWrongLenOfArgs,
                    format!(
                        "Expression {name} takes exactly 1 arguments. {} were passed in.",
                        args.len()
                    ),
                ));
            }
            (args.first(), None)
        }
    };
    let Some(date_node) = date_node else {
        return Ok(None);
    };
    let date = eval(date_node, scope)?;
    let Some(tz) = timezone_of(tz_node, scope)? else {
        return Ok(None);
    };
    if is_nullish(&date) {
        return Ok(None);
    }
    let millis = require_date(&date)?;
    Ok(Some(Parts::of(tz.to_local(millis))))
}

macro_rules! extractors {
    ($($op:ident, $args:ident, $name:literal, |$p:ident| $value:expr;)*) => {$(
        fn $args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
            extractor_args($name, arg)
        }

        fn $op<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
            match extract($name, args, scope)? {
                Some($p) => owned(int($value)),
                None => owned(Bson::Null),
            }
        }
    )*};
}

extractors! {
    op_year, year_args, "$year", |p| p.year;
    op_month, month_args, "$month", |p| p.month;
    op_day_of_month, day_of_month_args, "$dayOfMonth", |p| p.day;
    op_hour, hour_args, "$hour", |p| p.hour;
    op_minute, minute_args, "$minute", |p| p.minute;
    op_second, second_args, "$second", |p| p.second;
    op_millisecond, millisecond_args, "$millisecond", |p| p.millisecond;
    op_day_of_week, day_of_week_args, "$dayOfWeek", |p| p.weekday + 1;
    op_day_of_year, day_of_year_args, "$dayOfYear", |p| p.day_of_year;
    op_week, week_args, "$week", |p| p.week();
    op_iso_week, iso_week_args, "$isoWeek", |p| p.iso_week().1;
    op_iso_week_year, iso_week_year_args, "$isoWeekYear", |p| p.iso_week().0;
    op_iso_day_of_week, iso_day_of_week_args, "$isoDayOfWeek", |p| p.iso_day_of_week();
}

fn int(v: i64) -> Bson {
    i32::try_from(v).map_or(Bson::Int64(v), Bson::Int32)
}

// ---------------------------------------------------------------------------
// $dateToString.

pub(super) const DEFAULT_FORMAT: &str = "%Y-%m-%dT%H:%M:%S.%LZ";

/// Formats a date with MongoDB's `%` specifiers.
pub(super) fn format_date(format: &str, utc_ms: i64, tz: TimeZone) -> Result<String> {
    let p = Parts::of(tz.to_local(utc_ms));
    let mut out = String::with_capacity(format.len() + 8);
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        // Specifiers expand (`%z` is five bytes): a long format is stopped
        // at the string limit.
        crate::query::size::check_string_len(out.len())?;
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(spec) = chars.next() else {
            return Err(Error::new(
                ErrorCode::DateFormatTrailingPercent,
                "Unmatched '%' at end of format string".to_string(),
            ));
        };
        match spec {
            'Y' => {
                if !(0..=9999).contains(&p.year) {
                    return Err(Error::new(
                        ErrorCode::DateToStringYearOutOfRange,
                        format!(
                            "Could not convert date to string: date component was outside the \
                             supported range of 0-9999: {}",
                            p.year
                        ),
                    ));
                }
                out.push_str(&format!("{:04}", p.year));
            }
            'm' => out.push_str(&format!("{:02}", p.month)),
            'd' => out.push_str(&format!("{:02}", p.day)),
            'H' => out.push_str(&format!("{:02}", p.hour)),
            'M' => out.push_str(&format!("{:02}", p.minute)),
            'S' => out.push_str(&format!("{:02}", p.second)),
            'L' => out.push_str(&format!("{:03}", p.millisecond)),
            'j' => out.push_str(&format!("{:03}", p.day_of_year)),
            'w' => out.push_str(&format!("{}", p.weekday + 1)),
            'u' => out.push_str(&format!("{}", p.iso_day_of_week())),
            'U' => out.push_str(&format!("{:02}", p.week())),
            'V' => out.push_str(&format!("{:02}", p.iso_week().1)),
            'G' => out.push_str(&format!("{:04}", p.iso_week().0)),
            'Z' => {
                let m = tz.offset_minutes(utc_ms);
                out.push_str(&format!("{}{}", if m < 0 { '-' } else { '+' }, m.abs()));
            }
            'z' => {
                let m = tz.offset_minutes(utc_ms);
                let sign = if m < 0 { '-' } else { '+' };
                out.push_str(&format!("{sign}{:02}{:02}", m.abs() / 60, m.abs() % 60));
            }
            '%' => out.push('%'),
            other => {
                return Err(Error::new(
                    ErrorCode::DateFormatBadCharacter,
                    format!("Invalid format character '%{other}' in format string"),
                ))
            }
        }
    }
    Ok(out)
}

fn date_to_string_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Err(Error::new(
            ErrorCode::DateToStringNotObject,
            "$dateToString only supports an object as its argument".to_string(),
        ));
    };
    let args = object_form(doc, &["date", "format", "timezone", "onNull"], |f| {
        Error::new(
            ErrorCode::DateToStringUnknownArgument,
            format!("Unrecognized argument to $dateToString: {f}"),
        )
    })?;
    if !field_given(&args, 0) {
        return Err(Error::new(
            ErrorCode::DateToStringMissingDate,
            "Missing 'date' parameter to $dateToString".to_string(),
        ));
    }
    Ok(Some(args))
}

fn op_date_to_string<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    let Some(fields) = object_fields(args) else {
        return Err(Error::new(
            ErrorCode::DateToStringNotObject,
            "$dateToString only supports an object as its argument".to_string(),
        ));
    };
    let format = match eval_field(fields, 1, scope)? {
        None => None,
        Some(v) if is_nullish(&v) => return owned(Bson::Null),
        Some(v) => match v.as_deref() {
            Some(Bson::String(s)) => Some(s.clone()),
            _ => {
                return Err(Error::new(
                    ErrorCode::DateToStringFormatNotString,
                    format!(
                        "$dateToString requires that 'format' be a string, found: {} with value {}",
                        type_of(&v),
                        v.as_deref().map_or(String::new(), |b| b.to_string())
                    ),
                ))
            }
        },
    };
    let Some(tz) = timezone_of(present(fields, 2), scope)? else {
        return owned(Bson::Null);
    };
    let date = eval_field(fields, 0, scope)?.flatten();
    if is_nullish(&date) {
        return match eval_field(fields, 3, scope)? {
            Some(on_null) => Ok(on_null),
            None => owned(Bson::Null),
        };
    }
    let millis = require_date(&date)?;
    let text = format_date(format.as_deref().unwrap_or(DEFAULT_FORMAT), millis, tz)?;
    owned(Bson::String(text))
}

/// Field `i` of an object-form argument list when it was given.
fn present(fields: &[Node], i: usize) -> Option<&Node> {
    fields.get(i).filter(|n| !field_absent(n))
}

// ---------------------------------------------------------------------------
// $dateFromString and the parsing `$toDate` shares.

/// Why a date string did not parse (MongoDB's ConversionFailure).
pub(super) fn parse_failure(text: &str, why: &str) -> Error {
    Error::new(
        ErrorCode::ConversionFailure,
        format!("Error parsing date string '{text}'; {why}"),
    )
}

/// Parses ISO 8601-like strings: `2024-01-31`, `2024-01-31T10:20`,
/// `2024-01-31 10:20:30.123`, with an optional `Z` or `+hh[:mm]` offset.
/// Returns the UTC milliseconds and whether the string named its offset.
pub(super) fn parse_date_string(text: &str, tz: TimeZone) -> Result<(i64, bool)> {
    let s = text.trim();
    let mut cursor = Cursor { s, pos: 0 };
    let bad = |why: &str| parse_failure(text, why);
    let year = cursor
        .number(4, 4)
        .ok_or_else(|| bad("expected a 4-digit year"))?;
    let (mut month, mut day) = (1, 1);
    if cursor.eat('-') {
        month = cursor.number(1, 2).ok_or_else(|| bad("expected a month"))?;
        if cursor.eat('-') {
            day = cursor.number(1, 2).ok_or_else(|| bad("expected a day"))?;
        }
    }
    let (mut hour, mut minute, mut second, mut millis) = (0, 0, 0, 0);
    if cursor.eat('T') || cursor.eat('t') || cursor.eat(' ') {
        hour = cursor.number(1, 2).ok_or_else(|| bad("expected an hour"))?;
        if cursor.eat(':') {
            minute = cursor.number(2, 2).ok_or_else(|| bad("expected minutes"))?;
            if cursor.eat(':') {
                second = cursor.number(2, 2).ok_or_else(|| bad("expected seconds"))?;
                if cursor.eat('.') {
                    millis = cursor
                        .fraction_millis()
                        .ok_or_else(|| bad("bad fraction"))?;
                }
            }
        }
    }
    let rest = cursor.rest().trim_start();
    let offset = if rest.is_empty() {
        None
    } else if rest == "Z" || rest == "z" || rest == "UTC" || rest == "GMT" {
        Some(0)
    } else {
        Some(parse_offset(rest).ok_or_else(|| bad("trailing data"))?)
    };
    let local = civil_millis(year, month, day, hour, minute, second, millis)
        .ok_or_else(|| bad("a date component is out of range"))?;
    match offset {
        Some(offset) => Ok((local - offset, true)),
        None => Ok((tz.to_utc(local), false)),
    }
}

/// Local milliseconds of calendar fields, validating their ranges.
fn civil_millis(
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
    millis: i64,
) -> Option<i64> {
    let valid = (1..=12).contains(&month)
        && (1..=days_in_month(year, month)).contains(&day)
        && (0..24).contains(&hour)
        && (0..60).contains(&minute)
        && (0..60).contains(&second);
    valid.then(|| {
        days_from_civil(year, month, day) * MS_PER_DAY
            + hour * MS_PER_HOUR
            + minute * MS_PER_MINUTE
            + second * MS_PER_SECOND
            + millis
    })
}

struct Cursor<'s> {
    s: &'s str,
    pos: usize,
}

impl Cursor<'_> {
    fn eat(&mut self, c: char) -> bool {
        if self.s[self.pos..].starts_with(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn number(&mut self, min: usize, max: usize) -> Option<i64> {
        let digits = self.s[self.pos..]
            .bytes()
            .take(max)
            .take_while(u8::is_ascii_digit)
            .count();
        if digits < min {
            return None;
        }
        let n = self.s[self.pos..self.pos + digits].parse().ok()?;
        self.pos += digits;
        Some(n)
    }

    fn fraction_millis(&mut self) -> Option<i64> {
        let digits = self.s[self.pos..]
            .bytes()
            .take_while(u8::is_ascii_digit)
            .count();
        if digits == 0 {
            return None;
        }
        let text = &self.s[self.pos..self.pos + digits];
        self.pos += digits;
        let padded: String = text.chars().chain("000".chars()).take(3).collect();
        padded.parse().ok()
    }

    fn rest(&self) -> &str {
        &self.s[self.pos..]
    }
}

/// Parses `text` with an explicit `format` of `%` specifiers.
fn parse_with_format(text: &str, format: &str, tz: TimeZone) -> Result<i64> {
    let bad = |why: &str| parse_failure(text, why);
    let mut cursor = Cursor { s: text, pos: 0 };
    let (mut year, mut month, mut day) = (1970, 1, 1);
    let (mut hour, mut minute, mut second, mut millis) = (0, 0, 0, 0);
    let mut day_of_year: Option<i64> = None;
    let (mut iso_year, mut iso_week, mut iso_dow) = (None, None, None);
    let mut offset: Option<i64> = None;
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            if !cursor.eat(c) {
                return Err(bad("format does not match"));
            }
            continue;
        }
        let spec = chars.next().ok_or_else(|| {
            Error::new(
                ErrorCode::DateFormatTrailingPercent,
                "Unmatched '%' at end of format string".to_string(),
            )
        })?;
        let field = |cursor: &mut Cursor, min, max| {
            cursor
                .number(min, max)
                .ok_or_else(|| bad(&format!("no value for %{spec}")))
        };
        match spec {
            'Y' => year = field(&mut cursor, 4, 4)?,
            'm' => month = field(&mut cursor, 1, 2)?,
            'd' => day = field(&mut cursor, 1, 2)?,
            'H' => hour = field(&mut cursor, 1, 2)?,
            'M' => minute = field(&mut cursor, 1, 2)?,
            'S' => second = field(&mut cursor, 1, 2)?,
            'L' => {
                millis = cursor
                    .fraction_millis()
                    .ok_or_else(|| bad("no value for %L"))?
            }
            'j' => day_of_year = Some(field(&mut cursor, 1, 3)?),
            'G' => iso_year = Some(field(&mut cursor, 4, 4)?),
            'V' => iso_week = Some(field(&mut cursor, 1, 2)?),
            'u' => iso_dow = Some(field(&mut cursor, 1, 1)?),
            'z' | 'Z' => {
                let rest = cursor.rest();
                let len = rest
                    .char_indices()
                    .skip(1)
                    .find(|(_, c)| !(c.is_ascii_digit() || *c == ':'))
                    .map_or(rest.len(), |(i, _)| i);
                let token = &rest[..len];
                offset = Some(if spec == 'Z' {
                    token
                        .parse::<i64>()
                        .ok()
                        .map(|m| m * MS_PER_MINUTE)
                        .ok_or_else(|| bad("bad offset"))?
                } else if token == "Z" {
                    0
                } else {
                    parse_offset(token).ok_or_else(|| bad("bad offset"))?
                });
                cursor.pos += len;
            }
            '%' => {
                if !cursor.eat('%') {
                    return Err(bad("format does not match"));
                }
            }
            other => {
                return Err(Error::new(
                    ErrorCode::DateFormatBadCharacter,
                    format!("Invalid format character '%{other}' in format string"),
                ))
            }
        }
    }
    if !cursor.rest().is_empty() {
        return Err(bad("trailing data"));
    }
    let time = hour * MS_PER_HOUR + minute * MS_PER_MINUTE + second * MS_PER_SECOND + millis;
    let local = if let (Some(y), Some(w)) = (iso_year, iso_week) {
        iso_days(y, w, iso_dow.unwrap_or(1)) * MS_PER_DAY + time
    } else if let Some(doy) = day_of_year {
        (days_from_civil(year, 1, 1) + doy - 1) * MS_PER_DAY + time
    } else {
        civil_millis(year, month, day, hour, minute, second, millis)
            .ok_or_else(|| bad("a date component is out of range"))?
    };
    Ok(match offset {
        Some(offset) => local - offset,
        None => tz.to_utc(local),
    })
}

/// Days since the epoch of an ISO week date.
fn iso_days(iso_year: i64, week: i64, day_of_week: i64) -> i64 {
    let jan4 = days_from_civil(iso_year, 1, 4);
    let jan4_dow = Parts::of(jan4 * MS_PER_DAY).iso_day_of_week();
    let week1_monday = jan4 - (jan4_dow - 1);
    week1_monday + (week - 1) * 7 + (day_of_week - 1)
}

fn date_from_string_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Err(Error::new(
            ErrorCode::DateFromStringNotObject,
            format!(
                "$dateFromString only supports an object as an argument, found: {}",
                type_name(arg)
            ),
        ));
    };
    let args = object_form(
        doc,
        &["dateString", "format", "timezone", "onError", "onNull"],
        |f| {
            Error::new(
                ErrorCode::DateFromStringUnknownArgument,
                format!("Unrecognized argument to $dateFromString: {f}"),
            )
        },
    )?;
    if !field_given(&args, 0) {
        return Err(Error::new(
            ErrorCode::DateFromStringMissingDateString,
            "Missing 'dateString' parameter to $dateFromString".to_string(),
        ));
    }
    Ok(Some(args))
}

fn op_date_from_string<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    let Some(fields) = object_fields(args) else {
        return Err(Error::new(
            ErrorCode::DateFromStringNotObject,
            "$dateFromString only supports an object as an argument".to_string(),
        ));
    };
    let input = eval_field(fields, 0, scope)?.flatten();
    if is_nullish(&input) {
        return match eval_field(fields, 4, scope)? {
            Some(v) => Ok(v),
            None => owned(Bson::Null),
        };
    }
    let format = match eval_field(fields, 1, scope)? {
        None => None,
        Some(v) if is_nullish(&v) => return owned(Bson::Null),
        Some(v) => match v.as_deref() {
            Some(Bson::String(s)) => Some(s.clone()),
            _ => {
                return Err(Error::new(
                    ErrorCode::DateFromStringFormatNotString,
                    format!(
                        "$dateFromString requires that 'format' be a string, found: {}",
                        type_of(&v)
                    ),
                ))
            }
        },
    };
    let Some(tz) = timezone_of(present(fields, 2), scope)? else {
        return owned(Bson::Null);
    };
    let parsed = match input.as_deref() {
        Some(Bson::String(text)) => match &format {
            Some(f) => parse_with_format(text, f, tz),
            None => parse_date_string(text, tz).map(|(ms, _)| ms),
        },
        _ => Err(Error::new(
            ErrorCode::ConversionFailure,
            format!(
                "$dateFromString requires that 'dateString' be a string, found: {}",
                type_of(&input)
            ),
        )),
    };
    match parsed {
        Ok(ms) => owned(Bson::DateTime(DateTime::from_millis(ms))),
        // Only conversion failures are caught; format errors are not.
        Err(e) if e.code.number() == 241 => match eval_field(fields, 3, scope)? {
            Some(v) => Ok(v),
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

// ---------------------------------------------------------------------------
// Units: $dateTrunc, $dateAdd, $dateSubtract, $dateDiff.

#[derive(Debug, Clone, Copy, PartialEq)]
enum Unit {
    Year,
    Quarter,
    Month,
    Week,
    Day,
    Hour,
    Minute,
    Second,
    Millisecond,
}

impl Unit {
    fn parse(s: &str) -> Option<Unit> {
        Some(match s {
            "year" => Unit::Year,
            "quarter" => Unit::Quarter,
            "month" => Unit::Month,
            "week" => Unit::Week,
            "day" => Unit::Day,
            "hour" => Unit::Hour,
            "minute" => Unit::Minute,
            "second" => Unit::Second,
            "millisecond" => Unit::Millisecond,
            _ => return None,
        })
    }

    /// The fixed length of the unit, for units shorter than a month.
    fn fixed_ms(self) -> Option<i64> {
        match self {
            Unit::Week => Some(7 * MS_PER_DAY),
            Unit::Day => Some(MS_PER_DAY),
            Unit::Hour => Some(MS_PER_HOUR),
            Unit::Minute => Some(MS_PER_MINUTE),
            Unit::Second => Some(MS_PER_SECOND),
            Unit::Millisecond => Some(1),
            _ => None,
        }
    }

    fn months(self) -> Option<i64> {
        match self {
            Unit::Year => Some(12),
            Unit::Quarter => Some(3),
            Unit::Month => Some(1),
            _ => None,
        }
    }
}

/// A time unit named outside an expression (`$setWindowFields` bounds and
/// `unit`s, `$densify`'s step): `"year"` ... `"millisecond"`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeUnit(Unit);

impl TimeUnit {
    /// Parses a unit name; anything else is MongoDB's `FailedToParse`.
    pub fn parse(name: &str) -> Result<TimeUnit> {
        Unit::parse(name).map(TimeUnit).ok_or_else(|| {
            Error::new(
                ErrorCode::FailedToParse,
                format!("unknown time unit value: {name}"),
            )
        })
    }

    /// The unit's length, for units of a week or shorter.
    pub fn millis(self) -> Option<i64> {
        self.0.fixed_ms()
    }

    /// `utc_ms` plus `amount` units, in UTC (months clamp the day);
    /// `None` past the range of dates.
    pub fn add(self, utc_ms: i64, amount: i64) -> Option<i64> {
        add_to_date(utc_ms, self.0, amount, TimeZone::UTC)
    }
}

/// Evaluates a `unit` argument: `Ok(None)` for null.
fn unit_of<'a>(op: &str, node: Option<&'a Node>, scope: &Scope<'a>) -> Result<Option<Unit>> {
    let value = match node {
        Some(n) => eval(n, scope)?,
        None => None,
    };
    if is_nullish(&value) {
        return Ok(None);
    }
    let Some(Bson::String(s)) = value.as_deref() else {
        return Err(Error::new(
            ErrorCode::DateUnitNotString,
            format!(
                "{op} requires 'unit' to be a string, but got {}",
                type_of(&value)
            ),
        ));
    };
    Unit::parse(s).map(Some).ok_or_else(|| {
        Error::new(
            ErrorCode::DateUnitUnknown,
            format!("{op} parameter 'unit' value cannot be recognized as a time unit: {s}"),
        )
    })
}

/// Evaluates `startOfWeek` as a weekday (0 = Sunday): `Ok(None)` for null.
fn start_of_week<'a>(op: &str, node: Option<&'a Node>, scope: &Scope<'a>) -> Result<Option<i64>> {
    let Some(node) = node else {
        return Ok(Some(0));
    };
    let value = eval(node, scope)?;
    if is_nullish(&value) {
        return Ok(None);
    }
    let Some(Bson::String(s)) = value.as_deref() else {
        return Err(Error::new(
            ErrorCode::DateStartOfWeekNotString,
            format!(
                "{op} requires 'startOfWeek' to be a string, but got {}",
                type_of(&value)
            ),
        ));
    };
    let day = match s.to_ascii_lowercase().as_str() {
        "sunday" | "sun" => 0,
        "monday" | "mon" => 1,
        "tuesday" | "tue" => 2,
        "wednesday" | "wed" => 3,
        "thursday" | "thu" => 4,
        "friday" | "fri" => 5,
        "saturday" | "sat" => 6,
        _ => {
            return Err(Error::new(
                ErrorCode::DateStartOfWeekUnknown,
                format!(
                    "{op} parameter 'startOfWeek' value cannot be recognized as a day of a week: \
                     {s}"
                ),
            ))
        }
    };
    Ok(Some(day))
}

/// Months since year 0 of a local date.
fn month_index(p: &Parts) -> i64 {
    p.year * 12 + (p.month - 1)
}

/// Day number of the week start (`start` 0 = Sunday) on or before `days`.
fn week_start(days: i64, start: i64) -> i64 {
    let weekday = (days + 4).rem_euclid(7);
    days - (weekday - start).rem_euclid(7)
}

fn date_trunc_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Err(Error::new(
            ErrorCode::DateTruncNotObject,
            "$dateTrunc only supports an object as its argument".to_string(),
        ));
    };
    let args = object_form(
        doc,
        &["date", "unit", "binSize", "timezone", "startOfWeek"],
        |f| {
            Error::new(
                ErrorCode::DateTruncUnknownArgument,
                format!("Unrecognized argument to $dateTrunc: {f}"),
            )
        },
    )?;
    for (i, name, code) in [
        (0, "date", ErrorCode::DateTruncMissingDate),
        (1, "unit", ErrorCode::DateTruncMissingUnit),
    ] {
        if !field_given(&args, i) {
            return Err(Error::new(
                code,
                format!("Missing '{name}' parameter to $dateTrunc"),
            ));
        }
    }
    Ok(Some(args))
}

fn op_date_trunc<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    const OP: &str = "$dateTrunc";
    let Some(fields) = object_fields(args) else {
        return Err(Error::new(
            ErrorCode::DateTruncNotObject,
            "$dateTrunc only supports an object as its argument".to_string(),
        ));
    };
    let date = eval_field(fields, 0, scope)?.flatten();
    let Some(unit) = unit_of(OP, present(fields, 1), scope)? else {
        return owned(Bson::Null);
    };
    let bin_size = match eval_field(fields, 2, scope)? {
        None => 1,
        Some(v) if is_nullish(&v) => return owned(Bson::Null),
        Some(v) => {
            let n = v
                .as_deref()
                .and_then(Number::of)
                .and_then(integral_i64)
                .ok_or_else(|| {
                    Error::new(
                        ErrorCode::DateTruncBinSizeNotInt64,
                        format!(
                            "{OP} requires 'binSize' to be a 64-bit integer, but got value '{}' \
                             of type {}",
                            v.as_deref().map_or(String::new(), |b| b.to_string()),
                            type_of(&v)
                        ),
                    )
                })?;
            if n <= 0 {
                return Err(Error::new(
                    ErrorCode::DateTruncBinSizeNotPositive,
                    format!("{OP} requires 'binSize' to be greater than 0, but got value {n}"),
                ));
            }
            n
        }
    };
    let Some(tz) = timezone_of(present(fields, 3), scope)? else {
        return owned(Bson::Null);
    };
    let week_start_day = if unit == Unit::Week {
        match start_of_week(OP, present(fields, 4), scope)? {
            Some(d) => d,
            None => return owned(Bson::Null),
        }
    } else {
        0
    };
    if is_nullish(&date) {
        return owned(Bson::Null);
    }
    let Some(millis) = date.as_deref().and_then(date_millis) else {
        return Err(Error::new(
            ErrorCode::DateTruncDateNotDate,
            format!(
                "{OP} requires 'date' to be a date, but got {}",
                type_of(&date)
            ),
        ));
    };
    let local = tz.to_local(millis);
    // Bins count from 2000-01-01 in the time zone, as MongoDB's do.
    let reference_days = days_from_civil(2000, 1, 1);
    let truncated = if let Some(months) = unit.months() {
        let p = Parts::of(local);
        let span = months.saturating_mul(bin_size);
        let since = month_index(&p) - 2000 * 12;
        let bin = since.div_euclid(span).saturating_mul(span) + 2000 * 12;
        let year = bin.div_euclid(12);
        if !(-300_000_000..=300_000_000).contains(&year) {
            return Err(date_overflow(OP));
        }
        days_from_civil(year, bin.rem_euclid(12) + 1, 1) * MS_PER_DAY
    } else {
        let unit_ms = unit.fixed_ms().unwrap_or(1);
        let reference = if unit == Unit::Week {
            // The first week start on or after 2000-01-01.
            week_start(reference_days + 6, week_start_day) * MS_PER_DAY
        } else {
            reference_days * MS_PER_DAY
        };
        let span = i128::from(unit_ms) * i128::from(bin_size);
        let since = i128::from(local) - i128::from(reference);
        let bin = since.div_euclid(span) * span + i128::from(reference);
        i64::try_from(bin).map_err(|_| date_overflow(OP))?
    };
    owned(Bson::DateTime(DateTime::from_millis(tz.to_utc(truncated))))
}

fn integral_i64(n: Number) -> Option<i64> {
    match n {
        Number::Int32(i) => Some(i64::from(i)),
        Number::Int64(i) => Some(i),
        Number::Double(d) => {
            (d.fract() == 0.0 && crate::query::compare::f64_fits_i64(d)).then_some(d as i64)
        }
        Number::Decimal(d) => d.to_i64_exact(),
    }
}

fn date_overflow(op: &str) -> Error {
    Error::new(ErrorCode::Overflow, format!("date overflow in {op}"))
}

fn date_add_parser(op: &str, arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Err(Error::new(
            ErrorCode::DateAddNotObject,
            format!("{op} expects an object as its argument"),
        ));
    };
    let args = object_form(doc, &["startDate", "unit", "amount", "timezone"], |f| {
        Error::new(
            ErrorCode::DateAddUnknownArgument,
            format!("Unrecognized argument to {op}: {f}"),
        )
    })?;
    for (i, name) in [(0, "startDate"), (1, "unit"), (2, "amount")] {
        if !field_given(&args, i) {
            return Err(Error::new(
                ErrorCode::DateAddMissingArgument,
                format!("{op} requires startDate, unit, and amount to be present; missing {name}"),
            ));
        }
    }
    Ok(Some(args))
}

fn date_add_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    date_add_parser("$dateAdd", arg)
}

fn date_subtract_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    date_add_parser("$dateSubtract", arg)
}

fn op_date_add<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    date_arithmetic("$dateAdd", args, scope, 1)
}

fn op_date_subtract<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    date_arithmetic("$dateSubtract", args, scope, -1)
}

fn date_arithmetic<'a>(
    op: &str,
    args: &'a [Node],
    scope: &Scope<'a>,
    sign: i64,
) -> Result<Value<'a>> {
    let Some(fields) = object_fields(args) else {
        return Err(Error::new(
            ErrorCode::DateAddNotObject,
            format!("{op} expects an object as its argument"),
        ));
    };
    let start = eval_field(fields, 0, scope)?.flatten();
    let unit_value = eval_field(fields, 1, scope)?.flatten();
    let amount = eval_field(fields, 2, scope)?.flatten();
    let tz = timezone_of(present(fields, 3), scope)?;
    if is_nullish(&start) || is_nullish(&unit_value) || is_nullish(&amount) {
        return owned(Bson::Null);
    }
    let Some(tz) = tz else {
        return owned(Bson::Null);
    };
    let Some(millis) = start.as_deref().and_then(date_millis) else {
        return Err(Error::new(
            ErrorCode::DateAddStartNotDate,
            format!("{op} requires startDate to be convertible to a date"),
        ));
    };
    let Some(Bson::String(unit_name)) = unit_value.as_deref() else {
        return Err(Error::new(
            ErrorCode::DateAddUnitNotString,
            format!("{op} expects string defining the time unit"),
        ));
    };
    let Some(unit) = Unit::parse(unit_name) else {
        return Err(Error::new(
            ErrorCode::FailedToParse,
            format!("unknown time unit value: {unit_name}"),
        ));
    };
    let Some(amount) = amount
        .as_deref()
        .and_then(Number::of)
        .and_then(integral_i64)
    else {
        return Err(Error::new(
            ErrorCode::DateAddAmountNotInteger,
            format!("{op} expects integer amount of time units"),
        ));
    };
    let amount = amount.checked_mul(sign).ok_or_else(|| date_overflow(op))?;
    let result = add_to_date(millis, unit, amount, tz).ok_or_else(|| date_overflow(op))?;
    owned(Bson::DateTime(DateTime::from_millis(result)))
}

/// Adds `amount` units; months clamp the day to the month's last day.
fn add_to_date(utc_ms: i64, unit: Unit, amount: i64, tz: TimeZone) -> Option<i64> {
    if let Some(ms) = unit.fixed_ms() {
        // Days and weeks are calendar days in a zone with daylight saving
        // time (noon stays noon); shorter units are elapsed time.
        if matches!(unit, Unit::Day | Unit::Week) && matches!(tz, TimeZone::Named(_)) {
            let local = tz.to_local(utc_ms).checked_add(ms.checked_mul(amount)?)?;
            return Some(tz.to_utc(local));
        }
        return utc_ms.checked_add(ms.checked_mul(amount)?);
    }
    let months = unit.months()?.checked_mul(amount)?;
    let local = tz.to_local(utc_ms);
    let p = Parts::of(local);
    let index = month_index(&p).checked_add(months)?;
    let (year, month) = (index.div_euclid(12), index.rem_euclid(12) + 1);
    if !(-300_000..=300_000).contains(&year) {
        return None;
    }
    let day = p.day.min(days_in_month(year, month));
    let time = local.rem_euclid(MS_PER_DAY);
    let new_local = days_from_civil(year, month, day)
        .checked_mul(MS_PER_DAY)?
        .checked_add(time)?;
    Some(tz.to_utc(new_local))
}

fn date_diff_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Err(Error::new(
            ErrorCode::DateDiffNotObject,
            "$dateDiff only supports an object as its argument".to_string(),
        ));
    };
    let args = object_form(
        doc,
        &["startDate", "endDate", "unit", "timezone", "startOfWeek"],
        |f| {
            Error::new(
                ErrorCode::DateDiffUnknownArgument,
                format!("Unrecognized argument to $dateDiff: {f}"),
            )
        },
    )?;
    for (i, name, code) in [
        (0, "startDate", ErrorCode::DateDiffMissingStartDate),
        (1, "endDate", ErrorCode::DateDiffMissingEndDate),
        (2, "unit", ErrorCode::DateDiffMissingUnit),
    ] {
        if !field_given(&args, i) {
            return Err(Error::new(
                code,
                format!("Missing '{name}' parameter to $dateDiff"),
            ));
        }
    }
    Ok(Some(args))
}

fn op_date_diff<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    const OP: &str = "$dateDiff";
    let Some(fields) = object_fields(args) else {
        return Err(Error::new(
            ErrorCode::DateDiffNotObject,
            "$dateDiff only supports an object as its argument".to_string(),
        ));
    };
    let start = eval_field(fields, 0, scope)?.flatten();
    let end = eval_field(fields, 1, scope)?.flatten();
    let unit = unit_of(OP, present(fields, 2), scope)?;
    let tz = timezone_of(present(fields, 3), scope)?;
    let week_start_day = if unit == Some(Unit::Week) {
        start_of_week(OP, present(fields, 4), scope)?
    } else {
        Some(0)
    };
    if is_nullish(&start) || is_nullish(&end) {
        return owned(Bson::Null);
    }
    let (Some(unit), Some(tz), Some(week_start_day)) = (unit, tz, week_start_day) else {
        return owned(Bson::Null);
    };
    let as_date = |v: &Value<'_>, name: &str| {
        v.as_deref().and_then(date_millis).ok_or_else(|| {
            Error::new(
                ErrorCode::DateArgumentNotDate,
                format!(
                    "{OP} requires '{name}' to be a date, but got {}",
                    type_of(v)
                ),
            )
        })
    };
    let a = tz.to_local(as_date(&start, "startDate")?);
    let b = tz.to_local(as_date(&end, "endDate")?);
    let diff = match unit {
        Unit::Year | Unit::Quarter | Unit::Month => {
            let span = unit.months().unwrap_or(1);
            let (pa, pb) = (Parts::of(a), Parts::of(b));
            if span == 12 {
                pb.year - pa.year
            } else {
                month_index(&pb).div_euclid(span) - month_index(&pa).div_euclid(span)
            }
        }
        Unit::Week => {
            let (da, db) = (a.div_euclid(MS_PER_DAY), b.div_euclid(MS_PER_DAY));
            (week_start(db, week_start_day) - week_start(da, week_start_day)) / 7
        }
        other => {
            let ms = other.fixed_ms().unwrap_or(1);
            b.div_euclid(ms) - a.div_euclid(ms)
        }
    };
    owned(Bson::Int64(diff))
}

// ---------------------------------------------------------------------------
// $dateToParts and $dateFromParts.

fn date_to_parts_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Err(Error::new(
            ErrorCode::DateToPartsNotObject,
            "$dateToParts only supports an object as its argument".to_string(),
        ));
    };
    let args = object_form(doc, &["date", "timezone", "iso8601"], |f| {
        Error::new(
            ErrorCode::DateToPartsUnknownArgument,
            format!("Unrecognized argument to $dateToParts: {f}"),
        )
    })?;
    if !field_given(&args, 0) {
        return Err(Error::new(
            ErrorCode::DateToPartsMissingDate,
            "Missing 'date' parameter to $dateToParts".to_string(),
        ));
    }
    Ok(Some(args))
}

fn op_date_to_parts<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    let Some(fields) = object_fields(args) else {
        return Err(Error::new(
            ErrorCode::DateToPartsNotObject,
            "$dateToParts only supports an object as its argument".to_string(),
        ));
    };
    let date = eval_field(fields, 0, scope)?.flatten();
    let Some(tz) = timezone_of(present(fields, 1), scope)? else {
        return owned(Bson::Null);
    };
    let iso = match eval_field(fields, 2, scope)? {
        None => false,
        Some(v) if is_nullish(&v) => return owned(Bson::Null),
        Some(v) => match v.as_deref() {
            Some(Bson::Boolean(b)) => *b,
            _ => {
                return Err(Error::new(
                    ErrorCode::DateToPartsIsoNotBool,
                    format!("iso8601 must evaluate to a bool, found {}", type_of(&v)),
                ))
            }
        },
    };
    if is_nullish(&date) {
        return owned(Bson::Null);
    }
    let p = Parts::of(tz.to_local(require_date(&date)?));
    let mut out = Document::new();
    if iso {
        let (year, week) = p.iso_week();
        out.insert("isoWeekYear", int(year));
        out.insert("isoWeek", int(week));
        out.insert("isoDayOfWeek", int(p.iso_day_of_week()));
    } else {
        out.insert("year", int(p.year));
        out.insert("month", int(p.month));
        out.insert("day", int(p.day));
    }
    out.insert("hour", int(p.hour));
    out.insert("minute", int(p.minute));
    out.insert("second", int(p.second));
    out.insert("millisecond", int(p.millisecond));
    owned(Bson::Document(out))
}

const FROM_PARTS_FIELDS: [&str; 11] = [
    "year",
    "month",
    "day",
    "isoWeekYear",
    "isoWeek",
    "isoDayOfWeek",
    "hour",
    "minute",
    "second",
    "millisecond",
    "timezone",
];

fn date_from_parts_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Err(Error::new(
            ErrorCode::DateFromPartsNotObject,
            "$dateFromParts only supports an object as its argument".to_string(),
        ));
    };
    let args = object_form(doc, &FROM_PARTS_FIELDS, |f| {
        Error::new(
            ErrorCode::DateFromPartsUnknownArgument,
            format!("Unrecognized argument to $dateFromParts: {f}"),
        )
    })?;
    let has = |i| field_given(&args, i);
    let calendar = has(0) || has(1) || has(2);
    let iso = has(3) || has(4) || has(5);
    if calendar && iso {
        return Err(Error::new(
            ErrorCode::DateFromPartsMixedIso,
            "$dateFromParts does not allow mixing natural dates with ISO dates".to_string(),
        ));
    }
    if !has(0) && !has(3) {
        return Err(Error::new(
            ErrorCode::DateFromPartsMissingYear,
            "$dateFromParts requires either 'year' or 'isoWeekYear' to be present".to_string(),
        ));
    }
    Ok(Some(args))
}

fn op_date_from_parts<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    let Some(fields) = object_fields(args) else {
        return Err(Error::new(
            ErrorCode::DateFromPartsNotObject,
            "$dateFromParts only supports an object as its argument".to_string(),
        ));
    };
    let iso = present(fields, 3).is_some();
    // Each part: (value, default); null makes the result null.
    let mut parts = [0i64; 10];
    let defaults = [1970, 1, 1, 1970, 1, 1, 0, 0, 0, 0];
    let mut null = false;
    for (i, name) in FROM_PARTS_FIELDS.iter().take(10).enumerate() {
        parts[i] = defaults[i];
        let Some(v) = eval_field(fields, i, scope)? else {
            continue;
        };
        if is_nullish(&v) {
            null = true;
            continue;
        }
        let n = v
            .as_deref()
            .and_then(Number::of)
            .and_then(integral_i64)
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::DatePartNotInteger,
                    format!(
                        "'{name}' must evaluate to an integer, found {}",
                        type_of(&v)
                    ),
                )
            })?;
        let range = if i == 0 || i == 3 {
            1..=9999
        } else {
            -32768..=32767
        };
        if !range.contains(&n) {
            let code = if i == 0 || i == 3 {
                ErrorCode::DateFromPartsYearOutOfRange
            } else {
                ErrorCode::DateFromPartsPartOutOfRange
            };
            return Err(Error::new(
                code,
                format!(
                    "'{name}' must evaluate to a value in the range [{}, {}]; value {n} is not \
                     in range",
                    range.start(),
                    range.end()
                ),
            ));
        }
        parts[i] = n;
    }
    let Some(tz) = timezone_of(present(fields, 10), scope)? else {
        return owned(Bson::Null);
    };
    if null {
        return owned(Bson::Null);
    }
    let [year, month, day, iso_year, iso_week, iso_dow, hour, minute, second, ms] = parts;
    let days = if iso {
        iso_days(iso_year, iso_week, iso_dow)
    } else {
        // Months outside 1-12 carry into the year, days into the month.
        let index = year * 12 + month - 1;
        days_from_civil(index.div_euclid(12), index.rem_euclid(12) + 1, 1) + day - 1
    };
    let local = days * MS_PER_DAY
        + hour * MS_PER_HOUR
        + minute * MS_PER_MINUTE
        + second * MS_PER_SECOND
        + ms;
    owned(Bson::DateTime(DateTime::from_millis(tz.to_utc(local))))
}

#[cfg(test)]
mod tests {
    use super::super::Expr;
    use super::*;
    use bson::{doc, oid::ObjectId, Timestamp};

    fn date(s: &str) -> Bson {
        let (ms, _) = parse_date_string(s, TimeZone::UTC).unwrap();
        Bson::DateTime(DateTime::from_millis(ms))
    }

    /// Each case: the expression, then the expected value or error code.
    fn check(cases: Vec<(Document, std::result::Result<Bson, i32>)>) {
        // 2017-01-01 is a Sunday; 2020-02-29 a Saturday.
        let root = doc! {
            "d": date("2020-02-29T13:14:15.678Z"),
            "sun": date("2017-01-01T00:00:00Z"),
            "n": null,
            "s": "x",
        };
        for (expr, expected) in cases {
            let got = Expr::parse(&Bson::Document(expr.clone())).and_then(|e| e.evaluate(&root));
            match (&got, &expected) {
                (Ok(v), Ok(want)) => assert_eq!(v, want, "{expr}"),
                (Err(e), Err(code)) => assert_eq!(e.code.number(), *code, "{expr}: {e:?}"),
                _ => panic!("{expr}: got {got:?}, want {expected:?}"),
            }
        }
    }

    fn i(v: i32) -> std::result::Result<Bson, i32> {
        Ok(Bson::Int32(v))
    }

    /// MongoDB's documentation examples with Olson names, and both sides
    /// of daylight saving time changes.
    #[test]
    fn named_time_zones() {
        let s = |v: &str| Ok(Bson::String(v.to_string()));
        let d = |v: &str| Ok(date(v));
        check(vec![
            (
                doc! {"$dateToString": {"date": date("2014-01-01T08:15:39.736Z"),
                "format": "%H:%M:%S:%L%z", "timezone": "America/New_York"}},
                s("03:15:39:736-0500"),
            ),
            (
                doc! {"$dateToString": {"date": date("2014-07-01T08:15:39.736Z"),
                "format": "%H:%M %z %Z", "timezone": "America/New_York"}},
                s("04:15 -0400 -240"),
            ),
            (
                doc! {"$dateToParts": {"date": date("2017-01-01T01:29:09.123Z"),
                "timezone": "America/New_York"}},
                Ok(Bson::Document(
                    doc! {"year": 2016, "month": 12, "day": 31, "hour": 20,
                    "minute": 29, "second": 9, "millisecond": 123},
                )),
            ),
            (
                doc! {"$dateFromParts": {"year": 2016, "month": 12, "day": 31, "hour": 23,
                "minute": 46, "second": 12, "timezone": "America/New_York"}},
                d("2017-01-01T04:46:12Z"),
            ),
            (
                doc! {"$dateFromString": {"dateString": "2017-02-08T12:10:40.787",
                "timezone": "America/New_York"}},
                d("2017-02-08T17:10:40.787Z"),
            ),
            (
                doc! {"$dateFromString": {"dateString": "2017-07-08 12:10",
                "format": "%Y-%m-%d %H:%M", "timezone": "Europe/Berlin"}},
                d("2017-07-08T10:10:00Z"),
            ),
            (
                doc! {"$hour": {"date": date("2021-01-15T12:00:00Z"), "timezone": "Europe/Berlin"}},
                i(13),
            ),
            (
                doc! {"$hour": {"date": date("2021-07-15T12:00:00Z"), "timezone": "Europe/Berlin"}},
                i(14),
            ),
            (
                doc! {"$dayOfMonth": {"date": date("2021-07-01T02:00:00Z"), "timezone": "America/New_York"}},
                i(30),
            ),
            (
                doc! {"$hour": {"date": date("2021-07-15T12:00:00Z"), "timezone": "GMT"}},
                i(12),
            ),
            (
                doc! {"$hour": {"date": date("2021-07-15T12:00:00Z"), "timezone": "Z"}},
                i(12),
            ),
            // Berlin's clocks went forward on 2021-03-28: that day started at
            // 23:00 UTC the evening before.
            (
                doc! {"$dateTrunc": {"date": date("2021-03-28T12:00:00Z"), "unit": "day",
                "timezone": "Europe/Berlin"}},
                d("2021-03-27T23:00:00Z"),
            ),
            // A day later is noon again in New York across the change; 24
            // hours later is 13:00.
            (
                doc! {"$dateAdd": {"startDate": date("2021-03-13T17:00:00Z"), "unit": "day",
                "amount": 1, "timezone": "America/New_York"}},
                d("2021-03-14T16:00:00Z"),
            ),
            (
                doc! {"$dateAdd": {"startDate": date("2021-03-13T17:00:00Z"), "unit": "hour",
                "amount": 24, "timezone": "America/New_York"}},
                d("2021-03-14T17:00:00Z"),
            ),
            (
                doc! {"$dateDiff": {"startDate": date("2021-03-14T04:59:00Z"),
                "endDate": date("2021-03-14T05:01:00Z"), "unit": "day",
                "timezone": "America/New_York"}},
                Ok(Bson::Int64(1)),
            ),
            (
                doc! {"$hour": {"date": "$d", "timezone": "America/Gotham"}},
                Err(40485),
            ),
        ]);
    }

    #[test]
    fn calendar_round_trips() {
        for days in [-800_000, -1, 0, 1, 59, 365, 10_957, 18_321, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }

    #[test]
    fn field_extractors() {
        check(vec![
            (doc! {"$year": "$d"}, i(2020)),
            (doc! {"$month": "$d"}, i(2)),
            (doc! {"$dayOfMonth": "$d"}, i(29)),
            (doc! {"$hour": "$d"}, i(13)),
            (doc! {"$minute": "$d"}, i(14)),
            (doc! {"$second": "$d"}, i(15)),
            (doc! {"$millisecond": "$d"}, i(678)),
            (doc! {"$dayOfWeek": "$d"}, i(7)),
            (doc! {"$dayOfYear": "$d"}, i(60)),
            (doc! {"$week": "$d"}, i(8)),
            (doc! {"$isoWeek": "$d"}, i(9)),
            (doc! {"$isoWeekYear": "$d"}, i(2020)),
            (doc! {"$isoDayOfWeek": "$d"}, i(6)),
            (doc! {"$dayOfWeek": "$sun"}, i(1)),
            (doc! {"$week": "$sun"}, i(1)),
            (doc! {"$isoWeek": "$sun"}, i(52)),
            (doc! {"$isoWeekYear": "$sun"}, i(2016)),
            (doc! {"$isoDayOfWeek": "$sun"}, i(7)),
            (doc! {"$year": ["$d"]}, i(2020)),
            (doc! {"$hour": {"date": "$d", "timezone": "+05:30"}}, i(18)),
            (doc! {"$minute": {"date": "$d", "timezone": "+0530"}}, i(44)),
            (
                doc! {"$dayOfMonth": {"date": "$d", "timezone": "-14"}},
                i(28),
            ),
            (doc! {"$hour": {"date": "$d", "timezone": "GMT"}}, i(13)),
            (doc! {"$hour": {"date": "$d"}}, i(13)),
            (
                doc! {"$hour": {"date": "$d", "timezone": null}},
                Ok(Bson::Null),
            ),
            (
                doc! {"$hour": {"date": "$d", "timezone": "Mars/Base"}},
                Err(40485),
            ),
            (doc! {"$hour": {"date": "$d", "timezone": 5}}, Err(40517)),
            (doc! {"$hour": {"date": "$d", "zone": "UTC"}}, Err(40535)),
            (doc! {"$hour": {"timezone": "UTC"}}, Err(40539)),
            (doc! {"$year": "$n"}, Ok(Bson::Null)),
            (doc! {"$year": "$missing"}, Ok(Bson::Null)),
            (doc! {"$year": "$s"}, Err(16006)),
            (doc! {"$year": 5}, Err(16006)),
            (doc! {"$year": ["$d", "$d"]}, Err(16020)),
            (
                doc! {"$year": Bson::Timestamp(Timestamp { time: 1_600_000_000, increment: 1 })},
                i(2020),
            ),
            (
                doc! {"$year": ObjectId::parse_str("5ab9c3da31c2ab715d421285").unwrap()},
                i(2018),
            ),
            (doc! {"$year": {"$add": ["$d", 0]}}, i(2020)),
        ]);
    }

    #[test]
    fn date_to_string() {
        let s = |v: &str| Ok(Bson::String(v.to_string()));
        check(vec![
            (
                doc! {"$dateToString": {"date": "$d"}},
                s("2020-02-29T13:14:15.678Z"),
            ),
            (
                doc! {"$dateToString": {"date": "$d", "format": "%Y/%m/%d %H:%M:%S.%L"}},
                s("2020/02/29 13:14:15.678"),
            ),
            (
                doc! {"$dateToString": {"date": "$d", "format": "%j %w %u %U %V %G %%"}},
                s("060 7 6 08 09 2020 %"),
            ),
            (
                doc! {"$dateToString": {"date": "$d", "format": "%H:%M %z %Z", "timezone": "-05:30"}},
                s("07:44 -0530 -330"),
            ),
            (
                doc! {"$dateToString": {"date": "$d", "format": "%z %Z"}},
                s("+0000 +0"),
            ),
            (doc! {"$dateToString": {"date": "$n"}}, Ok(Bson::Null)),
            (
                doc! {"$dateToString": {"date": "$missing", "onNull": "none"}},
                s("none"),
            ),
            (
                doc! {"$dateToString": {"date": "$d", "format": null}},
                Ok(Bson::Null),
            ),
            (
                doc! {"$dateToString": {"date": "$d", "format": "%Q"}},
                Err(18536),
            ),
            (
                doc! {"$dateToString": {"date": "$d", "format": "abc%"}},
                Err(18535),
            ),
            (
                doc! {"$dateToString": {"date": "$d", "format": 1}},
                Err(18533),
            ),
            (doc! {"$dateToString": {"date": "$s"}}, Err(16006)),
            (doc! {"$dateToString": {"format": "%Y"}}, Err(18628)),
            (doc! {"$dateToString": {"date": "$d", "x": 1}}, Err(18534)),
            (doc! {"$dateToString": "$d"}, Err(18629)),
        ]);
    }

    #[test]
    fn date_from_string() {
        check(vec![
            (
                doc! {"$dateFromString": {"dateString": "2020-02-29T13:14:15.678Z"}},
                Ok(date("2020-02-29T13:14:15.678Z")),
            ),
            (
                doc! {"$dateFromString": {"dateString": "2020-02-29"}},
                Ok(date("2020-02-29T00:00:00Z")),
            ),
            (
                doc! {"$dateFromString": {"dateString": "2020-02-29 10:00", "timezone": "+02"}},
                Ok(date("2020-02-29T08:00:00Z")),
            ),
            (
                doc! {"$dateFromString": {"dateString": "2020-02-29T10:00:00-0100"}},
                Ok(date("2020-02-29T11:00:00Z")),
            ),
            (
                doc! {"$dateFromString": {"dateString": "29/02/2020 13h", "format": "%d/%m/%Y %Hh"}},
                Ok(date("2020-02-29T13:00:00Z")),
            ),
            (
                doc! {"$dateFromString": {"dateString": "2020-060", "format": "%Y-%j"}},
                Ok(date("2020-02-29T00:00:00Z")),
            ),
            (
                doc! {"$dateFromString": {"dateString": "2020-W09-6", "format": "%G-W%V-%u"}},
                Ok(date("2020-02-29T00:00:00Z")),
            ),
            (
                doc! {"$dateFromString": {"dateString": "2020-02-30"}},
                Err(241),
            ),
            (
                doc! {"$dateFromString": {"dateString": "garbage"}},
                Err(241),
            ),
            (
                doc! {"$dateFromString": {"dateString": "garbage", "onError": "bad"}},
                Ok(Bson::String("bad".into())),
            ),
            (doc! {"$dateFromString": {"dateString": 5}}, Err(241)),
            (
                doc! {"$dateFromString": {"dateString": null, "onNull": 0}},
                Ok(Bson::Int32(0)),
            ),
            (
                doc! {"$dateFromString": {"dateString": "$missing"}},
                Ok(Bson::Null),
            ),
            (doc! {"$dateFromString": {"format": "%Y"}}, Err(40542)),
            (
                doc! {"$dateFromString": {"dateString": "x", "y": 1}},
                Err(40541),
            ),
            (doc! {"$dateFromString": "2020"}, Err(40540)),
        ]);
    }

    #[test]
    fn date_trunc() {
        check(vec![
            (
                doc! {"$dateTrunc": {"date": "$d", "unit": "year"}},
                Ok(date("2020-01-01")),
            ),
            (
                doc! {"$dateTrunc": {"date": "$d", "unit": "quarter"}},
                Ok(date("2020-01-01")),
            ),
            (
                doc! {"$dateTrunc": {"date": "$d", "unit": "month"}},
                Ok(date("2020-02-01")),
            ),
            (
                // Five-month bins from 2000-01: 2020-02 is 241 months on.
                doc! {"$dateTrunc": {"date": "$d", "unit": "month", "binSize": 5}},
                Ok(date("2020-01-01")),
            ),
            (
                doc! {"$dateTrunc": {"date": "$d", "unit": "week"}},
                Ok(date("2020-02-23")),
            ),
            (
                doc! {"$dateTrunc": {"date": "$d", "unit": "week", "startOfWeek": "Monday"}},
                Ok(date("2020-02-24")),
            ),
            (
                doc! {"$dateTrunc": {"date": "$d", "unit": "day"}},
                Ok(date("2020-02-29")),
            ),
            (
                doc! {"$dateTrunc": {"date": "$d", "unit": "hour", "binSize": 6}},
                Ok(date("2020-02-29T12:00:00Z")),
            ),
            (
                doc! {"$dateTrunc": {"date": "$d", "unit": "minute", "binSize": 15}},
                Ok(date("2020-02-29T13:00:00Z")),
            ),
            (
                doc! {"$dateTrunc": {"date": "$d", "unit": "second"}},
                Ok(date("2020-02-29T13:14:15Z")),
            ),
            (
                doc! {"$dateTrunc": {"date": "$d", "unit": "day", "timezone": "+05:00"}},
                Ok(date("2020-02-28T19:00:00Z")),
            ),
            (
                doc! {"$dateTrunc": {"date": "$n", "unit": "day"}},
                Ok(Bson::Null),
            ),
            (
                doc! {"$dateTrunc": {"date": "$d", "unit": null}},
                Ok(Bson::Null),
            ),
            (
                doc! {"$dateTrunc": {"date": "$s", "unit": "day"}},
                Err(5439012),
            ),
            (doc! {"$dateTrunc": {"date": "$d", "unit": 1}}, Err(5439013)),
            (
                doc! {"$dateTrunc": {"date": "$d", "unit": "decade"}},
                Err(5439014),
            ),
            (
                doc! {"$dateTrunc": {"date": "$d", "unit": "week", "startOfWeek": 1}},
                Err(5439015),
            ),
            (
                doc! {"$dateTrunc": {"date": "$d", "unit": "week", "startOfWeek": "Satur"}},
                Err(5439016),
            ),
            (
                doc! {"$dateTrunc": {"date": "$d", "unit": "day", "binSize": 1.5}},
                Err(5439017),
            ),
            (
                doc! {"$dateTrunc": {"date": "$d", "unit": "day", "binSize": 0}},
                Err(5439018),
            ),
            (doc! {"$dateTrunc": {"unit": "day"}}, Err(5439009)),
            (doc! {"$dateTrunc": {"date": "$d"}}, Err(5439010)),
            (
                doc! {"$dateTrunc": {"date": "$d", "unit": "day", "x": 1}},
                Err(5439008),
            ),
            (doc! {"$dateTrunc": "$d"}, Err(5439007)),
        ]);
    }

    #[test]
    fn date_add_subtract() {
        let start = date("2020-10-31T10:10:05Z");
        check(vec![
            (
                doc! {"$dateAdd": {"startDate": start.clone(), "unit": "month", "amount": 1}},
                Ok(date("2020-11-30T10:10:05Z")),
            ),
            (
                doc! {"$dateAdd": {"startDate": "$d", "unit": "year", "amount": 1}},
                Ok(date("2021-02-28T13:14:15.678Z")),
            ),
            (
                doc! {"$dateAdd": {"startDate": start.clone(), "unit": "quarter", "amount": -1}},
                Ok(date("2020-07-31T10:10:05Z")),
            ),
            (
                doc! {"$dateAdd": {"startDate": start.clone(), "unit": "day", "amount": 1}},
                Ok(date("2020-11-01T10:10:05Z")),
            ),
            (
                doc! {"$dateAdd": {"startDate": start.clone(), "unit": "hour", "amount": 2.0}},
                Ok(date("2020-10-31T12:10:05Z")),
            ),
            (
                doc! {"$dateSubtract": {"startDate": start.clone(), "unit": "month", "amount": 1}},
                Ok(date("2020-09-30T10:10:05Z")),
            ),
            (
                doc! {"$dateSubtract": {"startDate": start.clone(), "unit": "week", "amount": 1}},
                Ok(date("2020-10-24T10:10:05Z")),
            ),
            (
                doc! {"$dateAdd": {"startDate": null, "unit": "day", "amount": 1}},
                Ok(Bson::Null),
            ),
            (
                doc! {"$dateAdd": {"startDate": "$d", "unit": "day", "amount": "$missing"}},
                Ok(Bson::Null),
            ),
            (
                doc! {"$dateAdd": {"startDate": "$d", "unit": "day", "amount": 1, "timezone": null}},
                Ok(Bson::Null),
            ),
            (
                doc! {"$dateAdd": {"startDate": "$s", "unit": "day", "amount": 1}},
                Err(5166403),
            ),
            (
                doc! {"$dateAdd": {"startDate": "$d", "unit": 1, "amount": 1}},
                Err(5166404),
            ),
            (
                doc! {"$dateAdd": {"startDate": "$d", "unit": "decade", "amount": 1}},
                Err(9),
            ),
            (
                doc! {"$dateAdd": {"startDate": "$d", "unit": "day", "amount": 1.5}},
                Err(5166405),
            ),
            (
                doc! {"$dateAdd": {"startDate": "$d", "unit": "day"}},
                Err(5166402),
            ),
            (
                doc! {"$dateAdd": {"startDate": "$d", "timeUnit": "day", "amount": 1}},
                Err(5166401),
            ),
        ]);
    }

    #[test]
    fn date_diff() {
        let l = |v: i64| Ok(Bson::Int64(v));
        check(vec![
            (
                doc! {"$dateDiff": {"startDate": date("2020-11-01T18:23:36Z"),
                "endDate": date("2020-11-01T20:00:00Z"), "unit": "hour"}},
                l(2),
            ),
            (
                doc! {"$dateDiff": {"startDate": date("2020-12-31T23:59:59Z"),
                "endDate": date("2021-01-01T00:00:00Z"), "unit": "year"}},
                l(1),
            ),
            (
                doc! {"$dateDiff": {"startDate": date("2020-01-15"),
                "endDate": date("2020-04-01"), "unit": "quarter"}},
                l(1),
            ),
            (
                doc! {"$dateDiff": {"startDate": date("2020-03-31"),
                "endDate": date("2020-01-01"), "unit": "month"}},
                l(-2),
            ),
            (
                doc! {"$dateDiff": {"startDate": date("2021-01-23"),
                "endDate": date("2021-01-24"), "unit": "week"}},
                l(1),
            ),
            (
                doc! {"$dateDiff": {"startDate": date("2021-01-24"),
                "endDate": date("2021-01-25"), "unit": "week", "startOfWeek": "Monday"}},
                l(1),
            ),
            (
                doc! {"$dateDiff": {"startDate": date("2021-01-24"),
                "endDate": date("2021-01-25"), "unit": "week"}},
                l(0),
            ),
            (
                doc! {"$dateDiff": {"startDate": date("2021-01-24T23:00:00Z"),
                "endDate": date("2021-01-25T01:00:00Z"), "unit": "day"}},
                l(1),
            ),
            (
                doc! {"$dateDiff": {"startDate": date("2021-01-24T23:00:00Z"),
                "endDate": date("2021-01-25T01:00:00Z"), "unit": "day", "timezone": "+02"}},
                l(0),
            ),
            (
                doc! {"$dateDiff": {"startDate": "$d", "endDate": "$d", "unit": "millisecond"}},
                l(0),
            ),
            (
                doc! {"$dateDiff": {"startDate": "$n", "endDate": "$d", "unit": "day"}},
                Ok(Bson::Null),
            ),
            (
                doc! {"$dateDiff": {"startDate": "$d", "endDate": "$d", "unit": "week",
                "startOfWeek": null}},
                Ok(Bson::Null),
            ),
            (
                doc! {"$dateDiff": {"startDate": "$d", "endDate": "$d", "unit": "day",
                "startOfWeek": "INVALID"}},
                l(0),
            ),
            (
                doc! {"$dateDiff": {"startDate": "$s", "endDate": "$d", "unit": "day"}},
                Err(5166307),
            ),
            (
                doc! {"$dateDiff": {"startDate": "$d", "endDate": "$d", "unit": "century"}},
                Err(5439014),
            ),
            (
                doc! {"$dateDiff": {"startDate": "$d", "endDate": "$d", "unit": "day",
                "timezone": "INVALID"}},
                Err(40485),
            ),
            (
                doc! {"$dateDiff": {"endDate": "$d", "unit": "day"}},
                Err(5166303),
            ),
            (
                doc! {"$dateDiff": {"startDate": "$d", "unit": "day"}},
                Err(5166304),
            ),
            (
                doc! {"$dateDiff": {"startDate": "$d", "endDate": "$d"}},
                Err(5166305),
            ),
            (
                doc! {"$dateDiff": {"startDate": "$d", "endDate": "$d", "unit": "day", "x": 1}},
                Err(5166302),
            ),
            (doc! {"$dateDiff": "startDate"}, Err(5166301)),
        ]);
    }

    #[test]
    fn date_parts() {
        check(vec![
            (
                doc! {"$dateToParts": {"date": "$d"}},
                Ok(Bson::Document(
                    doc! {"year": 2020, "month": 2, "day": 29, "hour": 13,
                    "minute": 14, "second": 15, "millisecond": 678},
                )),
            ),
            (
                doc! {"$dateToParts": {"date": "$d", "iso8601": true, "timezone": "+11:00"}},
                Ok(Bson::Document(
                    doc! {"isoWeekYear": 2020, "isoWeek": 9, "isoDayOfWeek": 7,
                    "hour": 0, "minute": 14, "second": 15, "millisecond": 678},
                )),
            ),
            (doc! {"$dateToParts": {"date": "$n"}}, Ok(Bson::Null)),
            (
                doc! {"$dateToParts": {"date": "$d", "iso8601": 1}},
                Err(40521),
            ),
            (doc! {"$dateToParts": {"date": "$d", "x": 1}}, Err(40520)),
            (doc! {"$dateToParts": {"timezone": "UTC"}}, Err(40522)),
            (
                doc! {"$dateFromParts": {"year": 2020, "month": 2, "day": 29, "hour": 13,
                "minute": 14, "second": 15, "millisecond": 678}},
                Ok(date("2020-02-29T13:14:15.678Z")),
            ),
            (
                doc! {"$dateFromParts": {"year": 2020}},
                Ok(date("2020-01-01")),
            ),
            (
                doc! {"$dateFromParts": {"year": 2020, "month": 14, "day": 0}},
                Ok(date("2021-01-31")),
            ),
            (
                doc! {"$dateFromParts": {"year": 2020, "hour": 12, "timezone": "-05:00"}},
                Ok(date("2020-01-01T17:00:00Z")),
            ),
            (
                doc! {"$dateFromParts": {"isoWeekYear": 2020, "isoWeek": 9, "isoDayOfWeek": 6}},
                Ok(date("2020-02-29")),
            ),
            (
                doc! {"$dateFromParts": {"isoWeekYear": 2017, "isoWeek": 1}},
                Ok(date("2017-01-02")),
            ),
            (
                doc! {"$dateFromParts": {"year": 2020, "month": null}},
                Ok(Bson::Null),
            ),
            (doc! {"$dateFromParts": {"year": "2020"}}, Err(40515)),
            (doc! {"$dateFromParts": {"year": 1.5}}, Err(40515)),
            (doc! {"$dateFromParts": {"year": 0}}, Err(40523)),
            (
                doc! {"$dateFromParts": {"year": 2020, "month": 40000}},
                Err(31034),
            ),
            (doc! {"$dateFromParts": {"month": 1}}, Err(40516)),
            (
                doc! {"$dateFromParts": {"year": 2020, "isoWeek": 1}},
                Err(40489),
            ),
            (doc! {"$dateFromParts": {"year": 2020, "x": 1}}, Err(40518)),
            (doc! {"$dateFromParts": 2020}, Err(40519)),
        ]);
    }
}
