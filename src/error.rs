//! MongoDB error codes and the error type every command returns.
//!
//! Every failure a client can cause is an [`Error`]: a MongoDB error code
//! (number and `codeName`) and a message that says what was wrong. Lower
//! layers with failures of their own (storage, wire) convert into it once,
//! at the command boundary, through `From`.

use std::fmt;

use bson::{doc, Document};

macro_rules! error_codes {
    ($($(#[$kind:ident])? $name:ident = $num:literal,)*) => {
        /// A MongoDB error code: its number and its `codeName`, as MongoDB
        /// 7.0 reports them (`src/mongo/base/error_codes.yml`). Codes marked
        /// `#[location]` are MongoDB's numbered assertions: the variant names
        /// what went wrong, clients see `Location<number>` as the `codeName`.
        #[derive(Debug, Clone, Copy)]
        pub enum ErrorCode {
            $($name,)*
            /// A numbered assertion code without a name here; its `codeName`
            /// is `Location<number>`.
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
                    $(ErrorCode::$name => std::borrow::Cow::Borrowed(code_name!($($kind)? $name $num)),)*
                    ErrorCode::Location(n) => std::borrow::Cow::Owned(format!("Location{n}")),
                }
            }

            /// The code with this number: its named variant when there is
            /// one. For tables of operators that carry their codes as numbers.
            pub fn from_number(number: i32) -> ErrorCode {
                match number {
                    $($num => ErrorCode::$name,)*
                    n => ErrorCode::Location(n),
                }
            }

            #[cfg(test)]
            const NUMBERS: &'static [i32] = &[$($num,)*];

            /// Each row of the table: the variant's name, its number and
            /// the `codeName` clients see.
            #[cfg(test)]
            const TABLE: &'static [(&'static str, i32, &'static str)] =
                &[$((stringify!($name), $num, code_name!($($kind)? $name $num)),)*];

            #[cfg(test)]
            fn variant_name(self) -> &'static str {
                match self {
                    $(ErrorCode::$name => stringify!($name),)*
                    ErrorCode::Location(_) => "Location",
                }
            }
        }
    };
}

/// The `codeName` of a code: its variant name, or `Location<number>` for the
/// codes marked `#[location]`.
macro_rules! code_name {
    (location $name:ident $num:literal) => {
        concat!("Location", $num)
    };
    ($name:ident $num:literal) => {
        stringify!($name)
    };
}

/// Codes are equal when clients cannot tell them apart: by number, so a
/// named code and `Location(n)` of the same number are the same code.
impl PartialEq for ErrorCode {
    fn eq(&self, other: &Self) -> bool {
        self.number() == other.number()
    }
}

impl Eq for ErrorCode {}

impl std::hash::Hash for ErrorCode {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.number().hash(state)
    }
}

// Sorted by number. Numbered assertions (`#[location]`) are named by what
// they mean; clients still see `Location<number>`.
error_codes! {
    InternalError = 1,
    BadValue = 2,
    NoSuchKey = 4,
    HostUnreachable = 6,
    HostNotFound = 7,
    UnknownError = 8,
    FailedToParse = 9,
    UserNotFound = 11,
    Unauthorized = 13,
    TypeMismatch = 14,
    Overflow = 15,
    InvalidLength = 16,
    ProtocolError = 17,
    AuthenticationFailed = 18,
    IllegalOperation = 20,
    EmptyArrayOperation = 21,
    InvalidBSON = 22,
    AlreadyInitialized = 23,
    NamespaceNotFound = 26,
    IndexNotFound = 27,
    PathNotViable = 28,
    InvalidPath = 30,
    RoleNotFound = 31,
    CannotBackfillArray = 34,
    ConflictingUpdateOperators = 40,
    CursorNotFound = 43,
    NoMatchingDocument = 47,
    NamespaceExists = 48,
    MaxTimeMSExpired = 50,
    DollarPrefixedFieldName = 52,
    InvalidIdField = 53,
    NotSingleValueField = 54,
    EmptyFieldName = 56,
    CommandNotFound = 59,
    ShardKeyNotFound = 61,
    ImmutableField = 66,
    CannotCreateIndex = 67,
    ShardNotFound = 70,
    InvalidOptions = 72,
    InvalidNamespace = 73,
    UnknownReplWriteConcern = 79,
    IndexOptionsConflict = 85,
    IndexKeySpecsConflict = 86,
    NetworkTimeout = 89,
    ShutdownInProgress = 91,
    GraphContainsCycle = 93,
    UnsatisfiableWriteConcern = 100,
    WriteConflict = 112,
    CommandNotSupported = 115,
    ConflictingOperationInProgress = 117,
    NamespaceNotSharded = 118,
    DocumentValidationFailure = 121,
    CannotBuildIndexKeys = 133,
    CappedPositionLost = 136,
    JSInterpreterFailure = 139,
    ExceededMemoryLimit = 146,
    InvalidSyntax = 150,
    IncompatibleCollationVersion = 161,
    ViewDepthLimitExceeded = 165,
    CommandNotSupportedOnView = 166,
    OptionNotSupportedOnView = 167,
    InvalidPipelineOperator = 168,
    CannotIndexParallelArrays = 171,
    PrimarySteppedDown = 189,
    InvalidIndexSpecificationOption = 197,
    IncompleteTransactionHistory = 217,
    QueryFeatureNotAllowed = 224,
    TransactionTooOld = 225,
    SnapshotTooOld = 239,
    ConversionFailure = 241,
    NoSuchTransaction = 251,
    TransactionCommitted = 256,
    InvalidResumeToken = 260,
    ExceededTimeLimit = 262,
    OperationNotSupportedInTransaction = 263,
    FailPointSetFailed = 266,
    ClientDisconnect = 279,
    ChangeStreamFatalError = 280,
    ChangeStreamHistoryLost = 286,
    NoQueryExecutionPlans = 291,
    QueryExceededMemoryLimitNoDiskUseAllowed = 292,
    APIVersionError = 322,
    APIStrictError = 323,
    APIDeprecationError = 324,
    MechanismUnavailable = 334,
    #[location] LookupResultTooLarge = 4568,
    SocketException = 9001,
    // `BSONElement::Obj()` on a value that is not an object (`$let`'s
    // `vars`, `$rand`'s argument).
    #[location] ExpectedObject = 10065,
    NotWritablePrimary = 10107,
    BSONObjectTooLarge = 10334,
    DuplicateKey = 11000,
    InterruptedAtShutdown = 11600,
    Interrupted = 11601,
    InterruptedDueToReplStateChange = 11602,
    #[location] MergeNoMatchingDocument = 13113,
    StaleConfig = 13388,
    NotPrimaryNoSecondaryOk = 13435,
    NotPrimaryOrSecondary = 13436,
    OutOfDiskSpace = 14031,
    #[location] StageGroupInvalidFields = 15947,
    #[location] GroupUnknownOperator = 15952,
    #[location] StageGroupMissingId = 15955,
    #[location] StageLimitNotPositive = 15958,
    #[location] MatchNotObject = 15959,
    #[location] ProjectNotObject = 15969,
    #[location] SortNotObject = 15973,
    #[location] SortMissingKey = 15976,
    #[location] StageUnwindWrongType = 15981,
    #[location] ExpressionWrongLenOfFields = 15983,
    #[location] FieldPathEmptyComponent = 15998,
    #[location] ConvertToDateUnsupported = 16006,
    #[location] CoerceToStringUnsupported = 16007,
    #[location] OperatorWrongLenOfArgs = 16020,
    #[location] SubstrBytesStartNotNumeric = 16034,
    #[location] SubstrBytesLengthNotNumeric = 16035,
    #[location] GroupDuplicateFieldName = 16406,
    #[location] FieldPathDollarPrefixed = 16410,
    #[location] FieldPathNullByte = 16411,
    #[location] FieldPathContainsDot = 16412,
    #[location] StringTooLong = 16493,
    TooManyRequests = 16500,
    #[location] AddNotNumericOrDate = 16554,
    #[location] MultiplyNotNumeric = 16555,
    #[location] SubtractBadTypes = 16556,
    #[location] DivideByZero = 16608,
    #[location] DivideNotNumeric = 16609,
    #[location] ModByZero = 16610,
    #[location] ModNotNumeric = 16611,
    #[location] AddMoreThanOneDate = 16612,
    #[location] ConcatNotString = 16702,
    #[location] CannotExtractGeoKeys = 16755,
    #[location] HashedIndexOnArray = 16766,
    #[location] VariableNameEmpty = 16866,
    #[location] VariableNameBadStart = 16867,
    #[location] VariableNameBadCharacter = 16868,
    #[location] FieldPathDollarAlone = 16872,
    #[location] LetNotObject = 16874,
    #[location] LetUnknownParameter = 16875,
    #[location] LetMissingVars = 16876,
    #[location] LetMissingIn = 16877,
    #[location] MapNotObject = 16878,
    #[location] MapUnknownParameter = 16879,
    #[location] MapMissingInput = 16880,
    #[location] MapMissingIn = 16882,
    #[location] MapInputNotArray = 16883,
    #[location] StageOutWrongType = 16990,
    #[location] AllElementsTrueNotArray = 17040,
    #[location] AnyElementTrueNotArray = 17041,
    #[location] SetIsSubsetSecondNotArray = 17042,
    #[location] SetUnionNotArray = 17043,
    #[location] SetEqualsNotArray = 17044,
    #[location] SetIsSubsetFirstNotArray = 17046,
    #[location] SetIntersectionNotArray = 17047,
    #[location] SetDifferenceFirstNotArray = 17048,
    #[location] SetDifferenceSecondNotArray = 17049,
    #[location] CondMissingIf = 17080,
    #[location] CondMissingThen = 17081,
    #[location] CondMissingElse = 17082,
    #[location] CondUnknownParameter = 17083,
    #[location] SizeNotArray = 17124,
    #[location] DistinctTooBig = 17217,
    #[location] UndefinedVariable = 17276,
    #[location] OutToSpecialCollection = 17385,
    #[location] GroupMemoryLimit = 17419,
    #[location] DateToStringFormatNotString = 18533,
    #[location] DateToStringUnknownArgument = 18534,
    #[location] DateFormatTrailingPercent = 18535,
    #[location] DateFormatBadCharacter = 18536,
    #[location] DateToStringYearOutOfRange = 18537,
    #[location] DateToStringMissingDate = 18628,
    #[location] DateToStringNotObject = 18629,
    AmbiguousIndexKeyPattern = 27000,
    #[location] FilterNotObject = 28646,
    #[location] FilterUnknownParameter = 28647,
    #[location] FilterMissingInput = 28648,
    #[location] FilterMissingCond = 28650,
    #[location] FilterInputNotArray = 28651,
    #[location] SubstrBytesStartInsideCharacter = 28656,
    #[location] SubstrBytesEndInsideCharacter = 28657,
    #[location] ConcatArraysNotArray = 28664,
    #[location] ExpressionWrongNumberOfArgs = 28667,
    #[location] AbsOfLongMin = 28680,
    #[location] ArrayElemAtNotArray = 28689,
    #[location] ArrayElemAtIndexNotNumeric = 28690,
    #[location] ArrayElemAtIndexNotInt32 = 28691,
    #[location] SqrtNegative = 28714,
    #[location] ArraySliceNotArray = 28724,
    #[location] ArraySliceSecondNotNumeric = 28725,
    #[location] ArraySliceSecondNotInt32 = 28726,
    #[location] ArraySliceThirdNotNumeric = 28727,
    #[location] ArraySliceThirdNotInt32 = 28728,
    #[location] ArraySliceThirdNotPositive = 28729,
    #[location] StageSampleNotObject = 28745,
    #[location] StageSampleSizeNotNumber = 28746,
    #[location] StageSampleSizeNegative = 28747,
    #[location] StageSampleUnknownOption = 28748,
    #[location] StageSampleMissingSize = 28749,
    #[location] LogArgumentNotNumeric = 28756,
    #[location] LogBaseNotNumeric = 28757,
    #[location] LogArgumentNotPositive = 28758,
    #[location] LogBaseInvalid = 28759,
    #[location] Log10NotPositive = 28761,
    #[location] PowBaseNotNumeric = 28762,
    #[location] PowExponentNotNumeric = 28763,
    #[location] PowZeroToNegative = 28764,
    #[location] SingleNumericArgNotNumeric = 28765,
    #[location] LnNotPositive = 28766,
    #[location] OutToShardedCollection = 28769,
    #[location] StageUnwindPathNotString = 28808,
    #[location] StageUnwindPreserveNotBool = 28809,
    #[location] StageUnwindIndexFieldBad = 28810,
    #[location] StageUnwindUnknownOption = 28811,
    #[location] StageUnwindNoPath = 28812,
    #[location] StageUnwindNoPrefix = 28818,
    #[location] StageUnwindIndexFieldDollar = 28822,
    #[location] StageUnsetInvalidType = 31002,
    #[location] RegexOperatorMissingInput = 31022,
    #[location] RegexOperatorMissingRegex = 31023,
    #[location] RegexOperatorUnknownArgument = 31024,
    #[location] DateFromPartsPartOutOfRange = 31034,
    #[location] StageUnsetNoPath = 31119,
    #[location] StageUnsetArrElementInvalidType = 31120,
    #[location] ProjectionPathCollision = 31249,
    #[location] ProjectionPathOverwrite = 31250,
    #[location] ExclusionExpression = 31252,
    #[location] ProjectionInclusionInExclusion = 31253,
    #[location] ProjectionExclusionInInclusion = 31254,
    #[location] PositionalWithElemMatch = 31255,
    #[location] ElemMatchWithPositional = 31256,
    #[location] SliceSkipNotNumber = 31257,
    #[location] SliceLimitNotNumber = 31258,
    #[location] SliceLimitNotPositive = 31259,
    #[location] PositionalWithExpression = 31271,
    #[location] SliceArrayWrongShape = 31272,
    #[location] SliceWrongType = 31273,
    #[location] ElemMatchProjectionNotObject = 31274,
    #[location] ElemMatchProjectionNested = 31275,
    #[location] PositionalMoreThanOne = 31276,
    #[location] PositionalWithLiteral = 31308,
    #[location] ExclusionWithExpression = 31310,
    #[location] MergeToSpecialCollection = 31319,
    #[location] MergeToInternalDatabase = 31320,
    #[location] OutToInternalDatabase = 31321,
    #[location] AggregatePositionalProject = 31324,
    #[location] AggregateElemMatchProject = 31325,
    #[location] PositionalNotAtEnd = 31394,
    #[location] ExclusionPositionalProjection = 31395,
    #[location] UnionWithSubPipelineStage = 31441,
    #[location] ReverseArrayNotArray = 34435,
    #[location] RangeStartNotNumeric = 34443,
    #[location] RangeStartNotInt32 = 34444,
    #[location] RangeEndNotNumeric = 34445,
    #[location] RangeEndNotInt32 = 34446,
    #[location] RangeStepNotNumeric = 34447,
    #[location] RangeStepNotInt32 = 34448,
    #[location] RangeStepZero = 34449,
    #[location] SubstrCpStartNotNumeric = 34450,
    #[location] SubstrCpStartNotInt32 = 34451,
    #[location] SubstrCpLengthNotNumeric = 34452,
    #[location] SubstrCpLengthNotInt32 = 34453,
    #[location] SubstrCpLengthNegative = 34454,
    #[location] SubstrCpStartNegative = 34455,
    #[location] ZipNotObject = 34460,
    #[location] ZipInputsNotArray = 34461,
    #[location] ZipDefaultsNotArray = 34462,
    #[location] ZipUseLongestLengthNotBool = 34463,
    #[location] ZipUnknownArgument = 34464,
    #[location] ZipMissingInputs = 34465,
    #[location] ZipDefaultsWithoutUseLongestLength = 34466,
    #[location] ZipDefaultsLengthMismatch = 34467,
    #[location] ZipInputNotArray = 34468,
    #[location] StrLenCpNotString = 34471,
    #[location] StrLenBytesNotString = 34473,
    #[location] SwitchNotObject = 40060,
    #[location] SwitchBranchesNotArray = 40061,
    #[location] SwitchBranchNotObject = 40062,
    #[location] SwitchBranchUnknownArgument = 40063,
    #[location] SwitchBranchMissingCase = 40064,
    #[location] SwitchBranchMissingThen = 40065,
    #[location] SwitchNoMatchingBranch = 40066,
    #[location] SwitchUnknownArgument = 40067,
    #[location] SwitchNoBranches = 40068,
    #[location] ReduceNotObject = 40075,
    #[location] ReduceUnknownArgument = 40076,
    #[location] ReduceMissingInput = 40077,
    #[location] ReduceMissingInitialValue = 40078,
    #[location] ReduceMissingIn = 40079,
    #[location] ReduceInputNotArray = 40080,
    #[location] InSecondArgNotArray = 40081,
    #[location] SplitInputNotString = 40085,
    #[location] SplitSeparatorNotString = 40086,
    #[location] SplitSeparatorEmpty = 40087,
    #[location] IndexOfArrayNotArray = 40090,
    #[location] IndexOfBytesInputNotString = 40091,
    #[location] IndexOfBytesTokenNotString = 40092,
    #[location] IndexOfCpInputNotString = 40093,
    #[location] IndexOfCpTokenNotString = 40094,
    #[location] IndexOfBoundNotInt32 = 40096,
    #[location] IndexOfBoundNegative = 40097,
    #[location] GraphLookupMemoryExceeded = 40099,
    #[location] GraphLookupMaxDepthNotNumber = 40100,
    #[location] GraphLookupMaxDepthNegative = 40101,
    #[location] GraphLookupMaxDepthNotIntegral = 40102,
    #[location] GraphLookupArgumentNotString = 40103,
    #[location] GraphLookupUnknownArgument = 40104,
    #[location] GraphLookupMissingArgument = 40105,
    #[location] SortByCountNotExpression = 40147,
    #[location] SortByCountFieldPath = 40148,
    #[location] StageCountNotString = 40156,
    #[location] StageCountBadPrefix = 40158,
    #[location] StageCountNullByte = 40159,
    #[location] StageCountContainsDot = 40160,
    #[location] FacetNotObject = 40169,
    #[location] FacetPipelineNotArray = 40170,
    #[location] FacetStageNotObject = 40171,
    #[location] GraphLookupRestrictNotObject = 40185,
    #[location] BucketTooFewBoundaries = 40192,
    #[location] BucketBoundariesMixedTypes = 40193,
    #[location] BucketBoundariesNotSorted = 40194,
    #[location] BucketDefaultNotConstant = 40195,
    #[location] BucketOutputNotObject = 40196,
    #[location] BucketUnknownOption = 40197,
    #[location] BucketMissingRequired = 40198,
    #[location] BucketDefaultInsideBoundaries = 40199,
    #[location] BucketBoundariesNotArray = 40200,
    #[location] BucketNotObject = 40201,
    #[location] BucketGroupByNotExpression = 40202,
    #[location] ReplaceRootNotObject = 40228,
    #[location] ReplaceRootSpecNotObject = 40229,
    #[location] StageGroupInvalidAccumulator = 40234,
    #[location] StageGroupFieldContainsDot = 40235,
    #[location] StageGroupFieldIsOperator = 40236,
    #[location] StageGroupUnaryOperator = 40237,
    #[location] StageGroupMultipleAccumulator = 40238,
    #[location] BucketAutoGroupByNotExpression = 40239,
    #[location] BucketAutoNotObject = 40240,
    #[location] BucketAutoBucketsNotNumber = 40241,
    #[location] BucketAutoBucketsNotInt32 = 40242,
    #[location] BucketAutoBucketsNotPositive = 40243,
    #[location] BucketAutoOutputNotObject = 40244,
    #[location] BucketAutoUnknownOption = 40245,
    #[location] BucketAutoMissingRequired = 40246,
    #[location] BucketAutoUnknownGranularity = 40257,
    #[location] BucketAutoGranularityNonNumeric = 40258,
    #[location] BucketAutoGranularityNaN = 40259,
    #[location] BucketAutoGranularityNegative = 40260,
    #[location] BucketAutoGranularityNotString = 40261,
    #[location] GraphLookupForeignMissingId = 40271,
    #[location] StageSpecificationNotObject = 40272,
    #[location] StageNotSingleField = 40323,
    #[location] StageUnknown = 40324,
    #[location] EmptyFieldPath = 40352,
    #[location] FieldPathTrailingDot = 40353,
    #[location] ArrayToObjectNotArray = 40386,
    #[location] ObjectToArrayNotObject = 40390,
    #[location] ArrayToObjectMixedForms = 40391,
    #[location] ArrayToObjectPairWrongKeyCount = 40392,
    #[location] ArrayToObjectPairMissingKOrV = 40393,
    #[location] ArrayToObjectPairKeyNotString = 40394,
    #[location] ArrayToObjectArrayKeyNotString = 40395,
    #[location] ArrayToObjectArrayNotPair = 40397,
    #[location] ArrayToObjectElementWrongType = 40398,
    #[location] MergeObjectsNotObject = 40400,
    #[location] MissingField = 40414,
    #[location] UnknownField = 40415,
    #[location] UnknownTimeZone = 40485,
    #[location] DateFromPartsMixedIso = 40489,
    #[location] DatePartNotInteger = 40515,
    #[location] DateFromPartsMissingYear = 40516,
    #[location] TimezoneNotString = 40517,
    #[location] DateFromPartsUnknownArgument = 40518,
    #[location] DateFromPartsNotObject = 40519,
    #[location] DateToPartsUnknownArgument = 40520,
    #[location] DateToPartsIsoNotBool = 40521,
    #[location] DateToPartsMissingDate = 40522,
    #[location] DateFromPartsYearOutOfRange = 40523,
    #[location] DateToPartsNotObject = 40524,
    #[location] DateConversionUnknownOption = 40535,
    #[location] DateConversionMissingDate = 40539,
    #[location] DateFromStringNotObject = 40540,
    #[location] DateFromStringUnknownArgument = 40541,
    #[location] DateFromStringMissingDateString = 40542,
    #[location] OpMsgMissingDb = 40571,
    #[location] StageNotAllowedInFacet = 40600,
    #[location] StageMustBeLast = 40601,
    #[location] StageMustBeFirst = 40602,
    #[location] ChangeStreamTwoResumeOptions = 40674,
    #[location] DateFromStringFormatNotString = 40684,
    #[location] TrimUnknownArgument = 50694,
    #[location] TrimMissingInput = 50695,
    #[location] TrimNotObject = 50696,
    #[location] TrimInputNotString = 50699,
    #[location] TrimCharsNotString = 50700,
    #[location] SubstrBytesStartNegative = 50752,
    #[location] ChangeStreamResumeAndStartAfter = 50865,
    #[location] RoleAlreadyExists = 51002,
    #[location] UserAlreadyExists = 51003,
    #[location] ValueNegative = 51024,
    #[location] LookupSubPipelineStage = 51047,
    #[location] RegexOptionsTwiceInRegex = 51074,
    #[location] RegexOptionsTwice = 51075,
    #[location] RoundTruncNotNumeric = 51081,
    #[location] RoundPrecisionNotIntegral = 51082,
    #[location] RoundPrecisionOutOfRange = 51083,
    #[location] RegexInvalid = 51091,
    #[location] RegexOperatorNotObject = 51103,
    #[location] RegexOperatorInputNotString = 51104,
    #[location] RegexOperatorRegexWrongType = 51105,
    #[location] RegexOperatorOptionsNotString = 51106,
    #[location] RegexOperatorOptionsTwice = 51107,
    #[location] RegexBadOption = 51108,
    #[location] RegexOperatorNullByte = 51109,
    #[location] RegexOperatorInvalid = 51111,
    #[location] MergeOnFieldMissing = 51132,
    #[location] MergeOnElementNotString = 51134,
    #[location] MergeIntoWrongType = 51178,
    #[location] StageMergeWrongType = 51182,
    #[location] MergeOnWrongType = 51186,
    #[location] MergeOnEmpty = 51187,
    #[location] MergeModesUnsupported = 51189,
    #[location] MergeWhenMatchedWrongType = 51191,
    #[location] MergeLetWithoutPipeline = 51199,
    #[location] PositionalNoMatchingElement = 51246,
    #[location] PositionalElementMismatch = 51247,
    #[location] EmptySubProjection = 51270,
    #[location] EmptyProjection = 51272,
    #[location] MergeLetReservedNew = 51273,
    #[location] ReplaceReplacementNotString = 51744,
    #[location] ReplaceFindNotString = 51745,
    #[location] ReplaceInputNotString = 51746,
    #[location] ReplaceMissingReplacement = 51747,
    #[location] ReplaceMissingFind = 51748,
    #[location] ReplaceMissingInput = 51749,
    #[location] ReplaceUnknownArgument = 51750,
    #[location] ReplaceNotObject = 51751,
    #[location] TopologyCounterNegative = 51758,
    #[location] MaxAwaitTimeNegative = 51759,
    #[location] AwaitableHelloIncomplete = 51760,
    #[location] TopologyCounterAhead = 51761,
    #[location] ExhaustHelloWithoutMaxAwait = 51763,
    #[location] FilterLimitNotInt32 = 327391,
    #[location] FilterLimitNotPositive = 327392,
    #[location] WindowLinearFillNeedsOneSortField = 605001,
    #[location] SortArrayNotObject = 2942500,
    #[location] SortArrayUnknownArgument = 2942501,
    #[location] SortArrayMissingInput = 2942502,
    #[location] SortArrayMissingSortBy = 2942503,
    #[location] SortArrayInputNotArray = 2942504,
    #[location] SortArrayBadSortBy = 2942505,
    #[location] RandInValidator = 3040500,
    #[location] RandTakesNoArguments = 3040501,
    #[location] GetFieldUnknownArgument = 3041701,
    #[location] GetFieldMissingField = 3041702,
    #[location] GetFieldTooManyArguments = 3041704,
    #[location] GetFieldInputNotObject = 3041705,
    #[location] FacetOutputTooLarge = 4031700,
    #[location] SetFieldNotObject = 4161100,
    #[location] SetFieldUnknownArgument = 4161101,
    #[location] SetFieldMissingField = 4161102,
    #[location] SetFieldMissingInput = 4161103,
    #[location] SetFieldMissingValue = 4161104,
    #[location] SetFieldInputNotObject = 4161105,
    #[location] SetFieldFieldNotConstant = 4161106,
    #[location] SetFieldFieldNotString = 4161107,
    #[location] SetFieldFieldIsPath = 4161108,
    #[location] FunctionInValidator = 4660800,
    #[location] EmitInValidator = 4660801,
    #[location] ArrayToObjectKeyNullByte = 4940400,
    #[location] StageSkipBadValue = 5107200,
    #[location] StageLimitBadValue = 5107201,
    #[location] DateDiffNotObject = 5166301,
    #[location] DateDiffUnknownArgument = 5166302,
    #[location] DateDiffMissingStartDate = 5166303,
    #[location] DateDiffMissingEndDate = 5166304,
    #[location] DateDiffMissingUnit = 5166305,
    #[location] DateArgumentNotDate = 5166307,
    #[location] DateAddNotObject = 5166400,
    #[location] DateAddUnknownArgument = 5166401,
    #[location] DateAddMissingArgument = 5166402,
    #[location] DateAddStartNotDate = 5166403,
    #[location] DateAddUnitNotString = 5166404,
    #[location] DateAddAmountNotInteger = 5166405,
    #[location] WindowBoundsInverted = 5339900,
    #[location] WindowDocumentBoundsNeedSortBy = 5339901,
    #[location] WindowRangeBoundsNeedOneSortField = 5339902,
    #[location] WindowRankTakesNoArguments = 5371601,
    #[location] WindowRankNeedsOneSortField = 5371602,
    #[location] WindowRankArgumentNotEmpty = 5371603,
    #[location] ProjectionFieldInvalid = 5392900,
    #[location] WindowIntegralInputInvalid = 5423900,
    #[location] WindowIntegralUnitNeedsDate = 5423901,
    #[location] WindowIntegralNeedsNumber = 5423902,
    #[location] WindowRangeDateNeedsUnit = 5429413,
    #[location] WindowRangeNeedsNumber = 5429414,
    #[location] WindowRangeUnitNeedsDate = 5429513,
    #[location] DateTruncNotObject = 5439007,
    #[location] DateTruncUnknownArgument = 5439008,
    #[location] DateTruncMissingDate = 5439009,
    #[location] DateTruncMissingUnit = 5439010,
    #[location] DateTruncDateNotDate = 5439012,
    #[location] DateUnitNotString = 5439013,
    #[location] DateUnitUnknown = 5439014,
    #[location] DateStartOfWeekNotString = 5439015,
    #[location] DateStartOfWeekUnknown = 5439016,
    #[location] DateTruncBinSizeNotInt64 = 5439017,
    #[location] DateTruncBinSizeNotPositive = 5439018,
    #[location] WindowUnitTooLarge = 5490710,
    #[location] WindowDerivativeUnitNeedsDate = 5624900,
    #[location] WindowDerivativeDateNeedsUnit = 5624901,
    #[location] WindowDerivativeNeedsNumber = 5624902,
    #[location] WindowDerivativeInputNullish = 5624903,
    #[location] MatchOperatorInExpression = 5626500,
    #[location] WindowCacheExceededMemory = 5643011,
    #[location] GetFieldFieldNotString = 5654602,
    #[location] DensifyValueNotNumericOrDate = 5733201,
    #[location] DensifyFieldInArray = 5733307,
    #[location] DensifyOverwritesNonObject = 5733308,
    #[location] DensifyStepNotPositive = 5733401,
    #[location] DensifyBoundsNotAscending = 5733402,
    #[location] DensifyBoundsNotTwo = 5733403,
    #[location] DensifyBoundsWrongType = 5733404,
    #[location] DensifyBoundsDateMixed = 5733405,
    #[location] DensifyBoundsNumberMixed = 5733406,
    #[location] DensifyPartitionBoundsNeedFields = 5733408,
    #[location] DensifyNumericBoundsWithUnit = 5733409,
    #[location] DensifyDateBoundsNeedUnit = 5733410,
    #[location] MergeIntoEmpty = 5786800,
    #[location] MergeIntoCollEmpty = 5786801,
    #[location] NAccumulatorNotObject = 5787801,
    #[location] NAccumulatorUnknownArgument = 5787901,
    #[location] NAccumulatorNNotIntegral = 5787902,
    #[location] NAccumulatorMissingN = 5787906,
    #[location] NAccumulatorMissingInput = 5787907,
    #[location] NAccumulatorNNotPositive = 5787908,
    #[location] NAccumulatorUnexpectedN = 5788002,
    #[location] NAccumulatorMissingOutput = 5788004,
    #[location] NOperatorInputNotArray = 5788200,
    #[location] NAccumulatorSortByNotObject = 5788604,
    #[location] ArrayExpected = 5858203,
    #[location] DensifyBoundsStepTypesDiffer = 5876900,
    #[location] DensifyTooManyDocuments = 5897900,
    #[location] DensifyBoundsNotNumbersOrDates = 5946800,
    #[location] DensifyBoundsUnknownString = 5946802,
    #[location] DensifyMemoryExceeded = 6007200,
    #[location] WindowLinearFillRepeatedSortValue = 6050106,
    #[location] FillOutputNotObject = 6050200,
    #[location] FillMethodAndValue = 6050201,
    #[location] FillUnknownMethod = 6050202,
    #[location] FillOutputEmpty = 6050203,
    #[location] FillPartitionByTwice = 6050204,
    #[location] DensifyValueUnitMismatch = 6053600,
    #[location] WindowOutputPathsConflict = 6307900,
    #[location] DensifyDateStepNotIntegral = 6586400,
    #[location] WindowRangeNeedsAscendingSort = 8947401,
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

    /// 10334 `BSONObjectTooLarge` for a document of `size` bytes, worded
    /// as MongoDB words it (the first element shortened).
    pub fn bson_object_too_large(size: usize, doc: &Document) -> Self {
        let first = match doc.iter().next() {
            // Shown without building a copy of a large value.
            Some((k, bson::Bson::String(v))) => {
                let mut end = v.len().min(64);
                while !v.is_char_boundary(end) {
                    end -= 1;
                }
                let more = if end < v.len() { "..." } else { "" };
                format!("{k}: \"{}{more}\"", &v[..end])
            }
            Some((k, bson::Bson::Document(_))) => format!("{k}: {{ ... }}"),
            Some((k, bson::Bson::Array(_))) => format!("{k}: [ ... ]"),
            Some((k, bson::Bson::Binary(b))) => format!("{k}: BinData({} bytes)", b.bytes.len()),
            Some((k, v)) => format!("{k}: {v}"),
            None => "EOO".to_string(),
        };
        Error::new(
            ErrorCode::BSONObjectTooLarge,
            format!(
                "BSONObj size: {size} (0x{size:X}) is invalid. Size must be between 0 and \
                 16793600(16MB) First element: {first}"
            ),
        )
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
    fn numbered_assertions_keep_their_location_code_name() {
        assert_eq!(ErrorCode::StageGroupMissingId.number(), 15955);
        assert_eq!(ErrorCode::StageGroupMissingId.name(), "Location15955");
        assert_eq!(
            ErrorCode::from_number(15955),
            ErrorCode::StageGroupMissingId
        );
        assert!(matches!(
            ErrorCode::from_number(15955),
            ErrorCode::StageGroupMissingId
        ));
        assert_eq!(ErrorCode::Location(15955), ErrorCode::StageGroupMissingId);
        assert!(matches!(
            ErrorCode::from_number(1),
            ErrorCode::InternalError
        ));
        assert!(matches!(
            ErrorCode::from_number(424242),
            ErrorCode::Location(424242)
        ));
    }

    #[test]
    fn codes_are_sorted_and_unique() {
        assert!(ErrorCode::NUMBERS.windows(2).all(|w| w[0] < w[1]));
        for &n in ErrorCode::NUMBERS {
            assert!(!matches!(ErrorCode::from_number(n), ErrorCode::Location(_)));
        }
    }

    #[test]
    fn every_named_code_round_trips() {
        for &(variant, number, code_name) in ErrorCode::TABLE {
            let code = ErrorCode::from_number(number);
            assert_eq!(code.variant_name(), variant, "{number}");
            assert_eq!(code.number(), number, "{variant}");
            assert_eq!(code.name(), code_name, "{variant}");
            let location = format!("Location{number}");
            assert!(
                code_name == variant || code_name == location,
                "{variant} = {number} is seen as {code_name}"
            );
        }
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
