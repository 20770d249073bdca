echo ran > /app/setup-ran
