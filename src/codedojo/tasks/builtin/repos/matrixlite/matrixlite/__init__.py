"""Dense matrices over exact fractions."""
