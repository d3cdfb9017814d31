"""The pure privilege evaluator (dsflow/core/access.py): inheritance, hierarchy, ownership, plans."""

from dsflow.core.access import AccessModel, Privilege, change_requirements

BASE = [
    ("database.db", {}), ("schema.db.public", {}), ("schema.db.private", {"owner": "team"}),
    ("relation.db.public.pv", {"store": "kafka"}), ("relation.db.public.other", {}),
    ("relation.db.private.secret", {}), ("store.kafka", {}),
    ("role.analyst", {"name": "analyst", "inherits": []}), ("role.lead", {"name": "lead", "inherits": ["analyst"]}),
    ("role.team", {"name": "team", "inherits": []}),
    ("grant.1", {"role": "analyst", "privilege": "USAGE", "on": "database.db"}),
    ("grant.2", {"role": "analyst", "privilege": "USAGE", "on": "schema.db.public"}),
    ("grant.3", {"role": "analyst", "privilege": "SELECT", "on": "relation.db.public.pv"}),
    ("grant.4", {"role": "lead", "privilege": "ALL", "on": "relation.db.public.other"}),
    ("binding.ann", {"user": "ann", "roles": ["analyst"]}), ("binding.leo", {"user": "leo", "roles": ["lead"]}),
    ("binding.tim", {"user": "tim", "roles": ["team"]}), ("binding.sam", {"user": "sam", "roles": ["securityadmin"]}),
    ("binding.ola", {"user": "ola", "roles": ["orgadmin"]}),
    ("query.db.public.q", {"sink": "db.public.other", "sources": [["db.public.pv", "p", "latest"]]}),
    ("datagen.feed", {"relation": "db.public.pv", "generator": "pageviews"}),
]
MODEL = AccessModel.from_records(BASE)


def test_inherited_roles_and_public():
    assert MODEL.roles_of("leo") == {"lead", "analyst", "public"}
    assert MODEL.roles_of("nobody") == {"public"}


def test_select_needs_usage_on_its_namespaces_and_names_what_is_missing():
    assert MODEL.check("ann", "SELECT", "relation.db.public.pv").allowed
    denied = MODEL.check("ann", Privilege.INSERT, "relation.db.public.pv")
    assert not denied.allowed and denied.missing == ((Privilege.INSERT, "relation.db.public.pv"),)
    assert "lacks INSERT on relation.db.public.pv" in denied.message and "analyst" in denied.message
    outsider = MODEL.check("nobody", "SELECT", "relation.db.public.pv")
    assert [p for p, _ in outsider.missing] == [Privilege.USAGE, Privilege.USAGE, Privilege.SELECT]


def test_all_is_every_privilege_of_the_type_and_inherits_down_roles():
    assert MODEL.check("leo", "INSERT", "relation.db.public.other").allowed
    assert not MODEL.check("ann", "INSERT", "relation.db.public.other").allowed


def test_owner_of_a_namespace_holds_everything_inside_but_needs_usage_above():
    decision = MODEL.check("tim", "SELECT", "relation.db.private.secret")
    assert decision.missing == ((Privilege.USAGE, "database.db"),)
    assert MODEL.check("tim", "CREATE", "schema.db.private").missing == ((Privilege.USAGE, "database.db"),)


def test_builtin_roles():
    assert MODEL.check("sam", "MANAGE_GRANTS", "organization").allowed
    assert not MODEL.check("sam", "CREATE_STORE", "organization").allowed
    assert MODEL.check("ola", "SELECT", "relation.db.private.secret").allowed
    sysadmin = AccessModel.from_records(BASE + [("binding.sys", {"user": "sys", "roles": ["sysadmin"]})])
    assert sysadmin.check("sys", "SELECT", "relation.db.public.pv").allowed  # default owner
    assert sysadmin.check("sys", "SELECT", "relation.db.private.secret").allowed  # owns the database around it
    owned = AccessModel.from_records([("database.team_db", {"owner": "team"}), ("relation.team_db.s.t", {}),
                                      ("binding.sys", {"user": "sys", "roles": ["sysadmin"]})])
    assert not owned.check("sys", "SELECT", "relation.team_db.s.t").allowed


def test_catalog_visibility():
    visible = {a for a, _ in BASE if MODEL.can_see("ann", a)}
    assert visible == {"database.db", "schema.db.public", "relation.db.public.pv", "datagen.feed"}  # feeds pv
    assert "query.db.public.q" in {a for a, _ in BASE if MODEL.can_see("leo", a)}  # SELECT on its sink
    assert not any(MODEL.can_see("nobody", a) for a, _ in BASE)
    assert not MODEL.can_see("tim", "datagen.feed") and MODEL.owner_of("datagen.feed") == "sysadmin"


def test_plan_changes_need_the_privileges_of_their_action():
    create_query = {"address": "query.db.public.q2", "action": "create",
                    "after": {"statement": "insert", "sink": "db.public.other", "sources": [["db.public.pv", "p"]]}}
    assert change_requirements(create_query) == [(Privilege.CREATE, "schema.db.public"),
                                                 (Privilege.INSERT, "relation.db.public.other"),
                                                 (Privilege.SELECT, "relation.db.public.pv")]
    plan = {"changes": [create_query,
                        {"address": "relation.db.public.pv", "action": "delete", "before": {}},
                        {"address": "grant.x", "action": "create", "after": {}},
                        {"address": "relation.db.public.other", "action": "no-op"}]}
    refused = {r.address: r for r in MODEL.authorize_plan("leo", plan)}
    assert set(refused) == {"query.db.public.q2", "relation.db.public.pv", "grant.x"}
    assert refused["query.db.public.q2"].decision.missing == ((Privilege.CREATE, "schema.db.public"),)
    assert "OWNERSHIP on relation.db.public.pv" in refused["relation.db.public.pv"].decision.message
    assert MODEL.authorize_plan("ola", plan) == []


def test_a_refresh_that_rolls_back_a_deployment_needs_ownership_and_a_drift_refresh_nothing():
    rollback = {"address": "query.db.public.q", "action": "refresh", "drift": False,
                "reason": "an interrupted blue/green deployment", "after": {"sink": "db.public.pv"}}
    drift = {"address": "query.db.public.q", "action": "refresh", "drift": True, "reason": "drift: not running"}
    assert [r.address for r in MODEL.authorize_plan("leo", {"changes": [rollback]})] == ["query.db.public.q"]
    assert MODEL.authorize_plan("leo", {"changes": [drift]}) == []
    assert MODEL.authorize_plan("ola", {"changes": [rollback]}) == []  # a role that owns the query
