"""Runs after the container fault tests (file order): nothing they started or imported is left."""


def test_no_container_image_or_network_is_left_after_the_container_tests(engine):
    assert engine.leftovers() == {"containers": [], "images": [], "networks": []}
