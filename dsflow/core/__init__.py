"""The pure core: addresses, resolved models, the graph, fingerprints, diff and plan.

Nothing here touches files, templates, Spark, brokers or clouds.
"""
