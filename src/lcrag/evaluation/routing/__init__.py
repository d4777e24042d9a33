"""Routing evaluated and fitted offline: reports over evaluation runs, fitting and calibrating routers, and where a
router's LC share lands on runs it was not fitted on."""
