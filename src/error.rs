//! MongoDB error codes and the error type every command returns.
//!
//! Every failure a client can cause is an [`Error`]: a MongoDB error code
//! (number and `codeName`) and a message that says what was wrong. Lower
//! layers with failures of their own (storage, wire) convert into it once,
//! at the command boundary, through `From`.

use std::fmt;

use bson::{doc, Document};

macro_rules! error_codes {
    ($($name:ident = $num:expr,)*) => {
        /// A MongoDB error code: its number and its `codeName`, as MongoDB
        /// 7.0 reports them (`src/mongo/base/error_codes.yml`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($name,)*
            /// One of MongoDB's numbered assertion codes without a name of
            /// its own; its `codeName` is `Location<number>`.
            Location(i32),
        }

        impl ErrorCode {
            /// The numeric code clients see in `code`.
            pub fn number(self) -> i32 {
                match self {
                    $(ErrorCode::$name => $num,)*
                    ErrorCode::Location(n) => n,
                }
            }

            /// The name clients see in `codeName`.
            pub fn name(self) -> std::borrow::Cow<'static, str> {
                match self {
                    $(ErrorCode::$name => std::borrow::Cow::Borrowed(stringify!($name)),)*
                    ErrorCode::Location(n) => std::borrow::Cow::Owned(format!("Location{n}")),
                }
            }
        }
    };
}

error_codes! {
    InternalError = 1,
    BadValue = 2,
    NoSuchKey = 4,
    FailedToParse = 9,
    Unauthorized = 13,
    TypeMismatch = 14,
    Overflow = 15,
    InvalidLength = 16,
    IllegalOperation = 20,
    EmptyArrayOperation = 21,
    InvalidBSON = 22,
    NamespaceNotFound = 26,
    IndexNotFound = 27,
    PathNotViable = 28,
    ConflictingUpdateOperators = 40,
    CursorNotFound = 43,
    NamespaceExists = 48,
    MaxTimeMSExpired = 50,
    DollarPrefixedFieldName = 52,
    InvalidIdField = 53,
    NotSingleValueField = 54,
    CommandNotFound = 59,
    ImmutableField = 66,
    CannotCreateIndex = 67,
    InvalidOptions = 72,
    InvalidNamespace = 73,
    IndexOptionsConflict = 85,
    IndexKeySpecsConflict = 86,
    OperationNotSupportedInTransaction = 263,
    NoSuchTransaction = 251,
    InvalidIndexSpecificationOption = 197,
    ProtocolError = 17,
    WriteConflict = 112,
    CommandNotSupported = 115,
    ConflictingOperationInProgress = 117,
    NamespaceNotSharded = 118,
    ExceededMemoryLimit = 146,
    InvalidSyntax = 150,
    InvalidPath = 30,
    BSONObjectTooLarge = 10334,
    DuplicateKey = 11000,
    Location16410 = 16410,
    TooManyRequests = 16500,
    Location17419 = 17419,
    QueryExceededMemoryLimitNoDiskUseAllowed = 292,
    Location31254 = 31254,
    Location40352 = 40352,
    Location51270 = 51270,
    UnknownError = 8,
    TransactionTooOld = 225,
    InvalidPipelineOperator = 168,
    QueryFeatureNotAllowed = 224,
    EmptyFieldName = 56,
    CannotBackfillArray = 34,
    Location40571 = 40571,
    Location40324 = 40324,
    Location40323 = 40323,
    Location13113 = 13113,
    Location28769 = 28769,
    ConversionFailure = 241,
    Location40415 = 40415,
    Location40414 = 40414,
    Location51024 = 51024,
    Location15958 = 15958,
    Location31253 = 31253,
    Location31250 = 31250,
    Location51091 = 51091,
    Location16554 = 16554,
    Location16608 = 16608,
    AlreadyInitialized = 23,
    ShardKeyNotFound = 61,
    OutOfDiskSpace = 14031,
    Location15955 = 15955,
    Location40602 = 40602,
    Location5858203 = 5858203,
    Location40228 = 40228,
    CannotIndexParallelArrays = 171,
    AmbiguousIndexKeyPattern = 27000,
}

/// A failure to report to the client as `{ok: 0, errmsg, code, codeName}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    pub code: ErrorCode,
    pub message: String,
    /// Extra fields MongoDB puts beside the code (`keyPattern`, `keyValue`).
    pub extra: Option<Document>,
}

/// The result type of everything above the storage layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error {
            code,
            message: message.into(),
            extra: None,
        }
    }

    pub fn bad_value(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::BadValue, message)
    }

    pub fn failed_to_parse(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::FailedToParse, message)
    }

    pub fn type_mismatch(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::TypeMismatch, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::InternalError, message)
    }

    pub fn with_extra(mut self, extra: Document) -> Self {
        self.extra = Some(extra);
        self
    }

    /// The fields of a command's error reply (without `ok`).
    pub fn to_reply_fields(&self) -> Document {
        let mut reply = doc! {
            "errmsg": &self.message,
            "code": self.code.number(),
            "codeName": self.code.name().as_ref(),
        };
        if let Some(extra) = &self.extra {
            reply.extend(extra.clone());
        }
        reply
    }

    /// The document of a write error inside `writeErrors`.
    pub fn to_write_error(&self, index: usize) -> Document {
        let mut reply = doc! {
            "index": index as i32,
            "code": self.code.number(),
            "codeName": self.code.name().as_ref(),
            "errmsg": &self.message,
        };
        if let Some(extra) = &self.extra {
            reply.extend(extra.clone());
        }
        reply
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.code.name(),
            self.code.number(),
            self.message
        )
    }
}

impl std::error::Error for Error {}

/// Builds an [`Error`] with a formatted message: `err!(BadValue, "x {}", y)`.
#[macro_export]
macro_rules! err {
    ($code:ident, $($arg:tt)*) => {
        $crate::error::Error::new($crate::error::ErrorCode::$code, format!($($arg)*))
    };
}

/// Returns early with an [`Error`]: `bail!(BadValue, "x {}", y)`.
#[macro_export]
macro_rules! bail {
    ($code:ident, $($arg:tt)*) => {
        return Err($crate::err!($code, $($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_mongodb_numbers_and_names() {
        assert_eq!(ErrorCode::CommandNotFound.number(), 59);
        assert_eq!(ErrorCode::CommandNotFound.name(), "CommandNotFound");
        assert_eq!(ErrorCode::DuplicateKey.number(), 11000);
        assert_eq!(ErrorCode::Location(31249).number(), 31249);
        assert_eq!(ErrorCode::Location(31249).name(), "Location31249");
    }

    #[test]
    fn reply_fields_carry_code_and_name() {
        let e = err!(BadValue, "bad {}", 1);
        let d = e.to_reply_fields();
        assert_eq!(d.get_str("errmsg").ok(), Some("bad 1"));
        assert_eq!(d.get_i32("code").ok(), Some(2));
        assert_eq!(d.get_str("codeName").ok(), Some("BadValue"));
    }
}
