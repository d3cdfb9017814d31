"""dsflow serve: the REST API, GraphQL and the web page over one project environment, with its roles enforced."""
