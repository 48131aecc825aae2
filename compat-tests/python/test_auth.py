"""pymongo logs in to a server started with --auth, with SCRAM-SHA-256
and SCRAM-SHA-1, and is refused with a wrong password.

Run: SHARDGATE_PORT=PORT python3 test_auth.py, with a first user boss
(password boss-secret, role root) in admin.
"""

import os
import sys

from pymongo import MongoClient
from pymongo.errors import OperationFailure

PORT = int(os.environ["SHARDGATE_PORT"])


def client(user, pwd, mechanism=None, source="admin"):
    kwargs = {"authMechanism": mechanism} if mechanism else {}
    return MongoClient(
        "127.0.0.1",
        PORT,
        username=user,
        password=pwd,
        authSource=source,
        directConnection=True,
        serverSelectionTimeoutMS=10000,
        **kwargs,
    )


def main():
    failures = []
    root = client("boss", "boss-secret")
    db = root["python_auth"]
    db.command("dropAllUsersFromDatabase")
    db.command("createUser", "py", pwd="py-pw", roles=["readWrite"])
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-1", None):
        c = client("py", "py-pw", mechanism, "python_auth")
        coll = c["python_auth"]["items"]
        coll.insert_one({"mechanism": mechanism or "negotiated"})
        status = c["python_auth"].command("connectionStatus")
        users = status["authInfo"]["authenticatedUsers"]
        if users != [{"user": "py", "db": "python_auth"}]:
            failures.append(f"{mechanism}: connectionStatus says {users}")
        c.close()
    if root["python_auth"]["items"].count_documents({}) != 3:
        failures.append("three logins should have inserted three documents")
    try:
        client("py", "wrong", "SCRAM-SHA-256", "python_auth")["python_auth"].command("ping")
        failures.append("a wrong password was accepted")
    except OperationFailure as e:
        if e.code != 18:
            failures.append(f"a wrong password gave {e.code}, not 18")
    db.command("dropAllUsersFromDatabase")
    root.drop_database("python_auth")
    if failures:
        print("\n".join("FAILED: " + f for f in failures))
        sys.exit(1)
    print("test_auth.py: all checks passed")


if __name__ == "__main__":
    main()
