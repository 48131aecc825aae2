// mongosh running a store locator against Shardgate.
//
// Run: mongosh --quiet --norc "mongodb://127.0.0.1:PORT/test?directConnection=true" \
//        compat-tests/mongosh/geo.js
// Stores with GeoJSON points, a 2dsphere index, the stores within 5 km
// nearest first ($near), and the same with distances ($geoNear), on an
// unsharded and a sharded copy. Any failed check throws.

const rdb = db.getSiblingDB("geolocator");
rdb.dropDatabase();

// Stores around Paris: [name, longitude, latitude].
const stores = [
  ["Louvre", 2.3376, 48.8606],
  ["Chatelet", 2.3470, 48.8584],
  ["Bastille", 2.3692, 48.8532],
  ["Montparnasse", 2.3212, 48.8421],
  ["La Defense", 2.2370, 48.8920],
  ["Versailles", 2.1301, 48.8049],
];
const docs = stores.map(([name, lng, lat], i) => ({
  _id: i + 1,
  name: name,
  location: { type: "Point", coordinates: [lng, lat] },
}));

const here = { type: "Point", coordinates: [2.3522, 48.8566] }; // Hotel de Ville
const expected = ["Chatelet", "Louvre", "Bastille", "Montparnasse"];

rdb.adminCommand({ shardCollection: "geolocator.sharded", key: { _id: "hashed" }, numInitialChunks: 8 });
for (const name of ["plain", "sharded"]) {
  const coll = rdb.getCollection(name);
  coll.insertMany(docs);
  const created = coll.createIndex({ location: "2dsphere" });
  if (created !== "location_2dsphere") throw new Error(name + ": createIndex gave " + created);

  const near = coll
    .find({ location: { $near: { $geometry: here, $maxDistance: 5000 } } })
    .toArray()
    .map((d) => d.name);
  if (JSON.stringify(near) !== JSON.stringify(expected)) {
    throw new Error(name + ": $near gave " + JSON.stringify(near));
  }

  const nearest = coll.find({ location: { $near: { $geometry: here } } }).limit(1).toArray();
  if (nearest.length !== 1 || nearest[0].name !== "Chatelet") {
    throw new Error(name + ": nearest store " + JSON.stringify(nearest));
  }

  const withDistance = coll
    .aggregate([
      { $geoNear: { near: here, distanceField: "distance", maxDistance: 5000 } },
      { $project: { _id: 0, name: 1, km: { $round: [{ $divide: ["$distance", 1000] }, 1] } } },
    ])
    .toArray();
  const names = withDistance.map((d) => d.name);
  if (JSON.stringify(names) !== JSON.stringify(expected)) {
    throw new Error(name + ": $geoNear gave " + JSON.stringify(withDistance));
  }
  // Chatelet is about 430 m away, Montparnasse about 2.8 km.
  if (withDistance[0].km !== 0.4 || withDistance[3].km !== 2.8) {
    throw new Error(name + ": distances " + JSON.stringify(withDistance));
  }

  let refused = null;
  try {
    coll.countDocuments({ location: { $near: { $geometry: here } } });
  } catch (e) {
    refused = e.code;
  }
  if (refused !== 5626500) throw new Error(name + ": countDocuments with $near gave " + refused);
}

print("geo.js: all checks passed");
