"""Open-loop traffic through the OpenAI API: profiles, the generator, its metrics endpoint."""
