// mongosh running a realistic report pipeline against Shardgate.
//
// Run: mongosh --quiet --norc "mongodb://127.0.0.1:PORT/test?directConnection=true" \
//        compat-tests/mongosh/aggregate.js
// A sales report ($match, $group with several accumulators, $sort, $limit,
// $lookup, $project) over an unsharded and a sharded copy of the same
// orders, checked against the answer computed here in JavaScript. Any failed
// check throws at the end, and mongosh then exits non-zero.

load(__dirname + "/lib/checks.js");

const dbName = "aggreport";
const rdb = db.getSiblingDB(dbName);
rdb.dropDatabase();

// Customers and 300 orders, made deterministically.
const regions = ["north", "south", "east", "west"];
const customers = [];
for (let i = 1; i <= 12; i++) {
  customers.push({ _id: i, name: "customer" + i, region: regions[i % 4] });
}
const products = ["anvil", "bolt", "cog", "drill", "easel", "fan"];
const orders = [];
for (let i = 0; i < 300; i++) {
  orders.push({
    _id: i,
    cust: (i * 7) % 12 + 1,
    status: i % 10 === 0 ? "cancelled" : "done",
    product: products[(i * 5) % 6],
    qty: (i % 4) + 1,
    unit: ((i * 13) % 50) + 5,
    day: new Date(Date.UTC(2024, 0, 1 + (i % 28))),
  });
}

// The expected report, computed in plain JavaScript.
const byCust = {};
for (const o of orders) {
  if (o.status !== "done") continue;
  const amount = o.qty * o.unit;
  const g = byCust[o.cust] || (byCust[o.cust] = { total: 0, n: 0, max: 0, products: new Set(), units: 0 });
  g.total += amount;
  g.n += 1;
  g.max = Math.max(g.max, amount);
  g.products.add(o.product);
  g.units += o.qty;
}
const expected = Object.keys(byCust)
  .map((k) => ({ cust: Number(k), ...byCust[k] }))
  .sort((a, b) => b.total - a.total || a.cust - b.cust)
  .slice(0, 5)
  .map((g) => ({
    customer: "customer" + g.cust,
    region: regions[g.cust % 4],
    total: g.total,
    orders: g.n,
    avg: Math.round((g.total / g.n) * 100) / 100,
    max: g.max,
    products: Array.from(g.products).sort(),
    units: g.units,
  }));

const report = [
  { $match: { status: "done" } },
  { $set: { amount: { $multiply: ["$qty", "$unit"] } } },
  {
    $group: {
      _id: "$cust",
      total: { $sum: "$amount" },
      orders: { $sum: 1 },
      avg: { $avg: "$amount" },
      max: { $max: "$amount" },
      products: { $addToSet: "$product" },
      units: { $sum: "$qty" },
    },
  },
  { $sort: { total: -1, _id: 1 } },
  { $limit: 5 },
  { $lookup: { from: "customers", localField: "_id", foreignField: "_id", as: "c" } },
  { $unwind: "$c" },
  {
    $project: {
      _id: 0,
      customer: "$c.name",
      region: "$c.region",
      total: 1,
      orders: 1,
      avg: { $round: ["$avg", 2] },
      max: 1,
      products: { $sortArray: { input: "$products", sortBy: 1 } },
      units: 1,
    },
  },
];

function normalize(rows) {
  // Field order as in `expected`, numbers as plain JavaScript numbers.
  return rows.map((r) => ({
    customer: r.customer,
    region: r.region,
    total: Number(r.total),
    orders: Number(r.orders),
    avg: Number(r.avg),
    max: Number(r.max),
    products: r.products,
    units: Number(r.units),
  }));
}

rdb.customers.insertMany(customers);
rdb.orders.insertMany(orders);
const enabled = attempt("sh.enableSharding", () => sh.enableSharding(dbName));
check(enabled !== undefined && enabled.ok === 1, "sh.enableSharding ok", enabled);
const sharded = attempt("sh.shardCollection", () => sh.shardCollection(dbName + ".sorders", { _id: "hashed" }));
check(sharded !== undefined && sharded.ok === 1, "sh.shardCollection ok", sharded);
rdb.sorders.insertMany(orders);

for (const name of ["orders", "sorders"]) {
  const got = attempt(name + " report", () => rdb.getCollection(name).aggregate(report).toArray());
  if (got !== undefined) {
    check(got.length === 5, name + " report rows", got.length);
    check(
      EJSON.stringify(normalize(got)) === EJSON.stringify(expected),
      name + " report matches the expected report " + EJSON.stringify(expected),
      got,
    );
  }
  // mongosh's countDocuments is an aggregate ($match + $group).
  const done = attempt(name + " countDocuments", () => rdb.getCollection(name).countDocuments({ status: "done" }));
  check(done === 270, name + " countDocuments", done);
  // A cursor followed over several batches.
  const all = attempt(name + " batched", () =>
    rdb.getCollection(name).aggregate([{ $sort: { _id: 1 } }, { $project: { _id: 1 } }], { cursor: { batchSize: 7 } }).toArray(),
  );
  check(all !== undefined && all.length === 300 && all[299]._id === 299, name + " batched aggregate", all && all.length);
  // Revenue per day of the week with $dateToString and $facet.
  const facet = attempt(name + " facet", () =>
    rdb.getCollection(name).aggregate([
      { $match: { status: "done" } },
      {
        $facet: {
          byProduct: [{ $sortByCount: "$product" }, { $sort: { _id: 1 } }],
          firstDay: [{ $group: { _id: { $dateToString: { format: "%Y-%m-%d", date: "$day" } }, n: { $sum: 1 } } }, { $sort: { _id: 1 } }, { $limit: 1 }],
        },
      },
    ]).toArray(),
  );
  if (facet !== undefined) {
    const byProduct = facet[0].byProduct;
    check(byProduct.length === 6, name + " facet products", byProduct);
    check(byProduct.reduce((s, p) => s + Number(p.count), 0) === 270, name + " facet product counts", byProduct);
    check(facet[0].firstDay[0]._id === "2024-01-01", name + " facet first day", facet[0].firstDay);
  }
}

// A report written out with $merge, then read back.
attempt("$merge report", () =>
  rdb.orders.aggregate([
    { $match: { status: "done" } },
    { $group: { _id: "$product", revenue: { $sum: { $multiply: ["$qty", "$unit"] } } } },
    { $merge: { into: "revenue" } },
  ]).toArray(),
);
check(rdb.revenue.countDocuments({}) === 6, "$merge wrote one row per product", rdb.revenue.find().toArray());

rdb.dropDatabase();

if (failures.length > 0) {
  throw new Error("mongosh aggregate: " + failures.length + " check(s) failed:\n" + failures.join("\n"));
}
print("mongosh aggregate: all checks passed");
