// The checks every mongosh script here records its findings with; load
// it first: load(__dirname + "/lib/checks.js").
//
// check(cond, what, got) prints and records a failure when cond is false
// (with the value got, if given); attempt(what, fn) runs fn and records a
// failure if it throws. A script ends by throwing when `failures` is not
// empty, so mongosh exits non-zero.

globalThis.failures = [];

globalThis.check = function check(cond, what, got) {
  if (!cond) {
    const line = "FAILED: " + what + (got === undefined ? "" : " (got " + EJSON.stringify(got, { relaxed: false }) + ")");
    print(line);
    failures.push(line);
  }
};

globalThis.attempt = function attempt(what, fn) {
  try {
    return fn();
  } catch (e) {
    check(false, what + " threw " + e.message);
    return undefined;
  }
};
