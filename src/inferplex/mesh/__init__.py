"""The model mesh (docs/mesh.md): models placed on replicas by a consistent-hash ring, so the
number of models served grows with the number of replicas. nginx routes; this room only says
where each model belongs (ring), which models a replica loads (replica) and writes nginx's
configuration from the same ring (nginx)."""
