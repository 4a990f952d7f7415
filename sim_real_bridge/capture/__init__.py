"""capture layer of sim_real_bridge."""
