// (helper ANA writes this file: issue 23)
